"""The live view in a real terminal: tmux at 80, 120 and 200 columns, on recorded captures.

Every number of the capture must be on screen whole at each width (bars and the sparkline give
way first), and no line may be wider than the terminal. `capture()` is also how the screens in
docs/commands/monitor-screens/ were made (`python -m tests.integration.test_monitor_tmux`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import NVSMI, ROOT

pytestmark = [pytest.mark.integration, pytest.mark.slow]

H200 = NVSMI / "h200-capture-idle-load.txt"  # nvidia-smi -q captured idle and under gpu_burn
ADA = NVSMI / "rtx4000-sff-ada-4procs-q-x-v13.xml"  # four processes, a long model name
WIDTHS = (80, 120, 200)


class Tmux:
    """`dlrig monitor ARGS` in a detached tmux server of its own (a killed one may still be
    exiting), `width` columns wide; the server goes when the block ends."""

    def __init__(self, args: tuple[str, ...], width: int, height: int = 30) -> None:
        tmux = shutil.which("tmux")
        assert tmux, "tmux is installed by make test (.ci/system-packages.txt)"
        self.tmux = tmux
        self.session = f"dlrig-{uuid.uuid4().hex[:8]}"
        self.socket = f"{self.session}-socket"
        self.env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
        self.env["TERM"] = "xterm-256color"
        command = " ".join([sys.executable, "-m", "dlrig.cli.main", "monitor", *args])
        self.run("new-session", "-d", "-s", self.session, "-x", str(width), "-y", str(height),
                 "-c", str(ROOT), command)  # fmt: skip

    def run(self, *args: str) -> str:
        return subprocess.run(
            [self.tmux, "-L", self.socket, *args],
            check=True, capture_output=True, text=True, env=self.env,
        ).stdout  # fmt: skip

    def screen(self, escapes: bool = False) -> str:
        return self.run("capture-pane", "-p", *(["-e"] if escapes else []), "-t", self.session)

    def screen_when(self, *texts: str, escapes: bool = False) -> str:
        """The screen once every text is on it (pytest-timeout bounds the wait)."""
        screen = ""
        while not all(text in screen for text in texts):
            time.sleep(0.2)
            screen = self.screen(escapes)
        return screen

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", self.session, *keys)

    def __enter__(self) -> Tmux:
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run([self.tmux, "-L", self.socket, "kill-server"], check=False,
                       capture_output=True)  # fmt: skip


def capture(replay: Path, width: int, extra: tuple[str, ...] = ()) -> str:
    """`dlrig monitor` on the replay at `width` columns: the screen once the first frame and
    its reading are drawn, and one frame more (the sparkline has two points)."""
    with Tmux(("--replay", str(replay), "--interval", "0.2", *extra), width) as tmux:
        tmux.screen_when("»", "PCIe")
        time.sleep(0.5)
        return tmux.screen()


@pytest.mark.parametrize("width", WIDTHS)
def test_every_number_is_whole_at_each_width(width):
    screen = capture(H200, width, ("--replay-state", "load", "--replicate", "2"))
    lines = screen.splitlines()
    assert all(len(line) <= width for line in lines), screen
    # The capture's own figures (nvidia-smi -q under gpu_burn): util, memory, power, temperature,
    # SM clock and the PCIe link, for both replicated GPUs.
    rows = [line for line in lines if "H200" in line]
    assert len(rows) == 2, screen
    for number in ("100%", "31.6/140.4", "627/700", "52°C", "1980/1980", "Gen5 x16"):
        assert all(number in row for row in rows), (number, screen)
    assert not any("…" in row for row in rows), screen
    header = next(line for line in lines if line.startswith("GPU "))
    for column in ("util", "mem GiB", "power W", "temp", "SM MHz", "PCIe"):
        assert column in header, screen
    # Decoration only where there is room: the sparkline's column at 120 and wider.
    assert ("trend" in header) == (width >= 120), screen


@pytest.mark.parametrize("width", WIDTHS)
def test_processes_keep_their_numbers_and_only_names_are_cut(width):
    screen = capture(ADA, width)
    lines = screen.splitlines()
    assert all(len(line) <= width for line in lines), screen
    for pid, gib in (("1842", "0.4"), ("3190", "0.4"), ("4937", "0.2"), ("34626", "0.2")):
        row = next(line for line in lines if f" {pid} " in line)
        assert gib in row.split(), screen
    assert "210/3105" in screen and "38°C" in screen and "3.5/20.0" in screen, screen


def test_keys_select_sort_and_refuse_to_signal_a_replays_process():
    encode = NVSMI / "rtx4080super-capture-idle-load.txt"  # seven processes under load
    args = ("--replay", str(encode), "--replay-state", "load", "--interval", "0.2",
            ";", "echo", "EXIT=$?", ";", "sleep", "60")  # fmt: skip
    with Tmux(args, 140) as tmux:
        tmux.screen_when("keys: ")
        tmux.keys("Down", "Down", "s")
        screen = tmux.screen_when("[sort: gpu-memory]", escapes=True)
        # The second row (pid 5021, the second ffmpeg) is drawn in reverse video: selected.
        [row] = [line for line in screen.splitlines() if " 5021 " in line]
        assert "\x1b[7m" in row, screen
        tmux.keys("K")
        tmux.screen_when("no SIGKILL sent: a replay's processes are not on this machine")
        tmux.keys("q")
        tmux.screen_when("EXIT=0")


def main() -> None:
    """Write the screens the docs show."""
    out = ROOT / "docs" / "commands" / "monitor-screens"
    out.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        screen = capture(H200, width, ("--replay-state", "load", "--replicate", "2"))
        (out / f"h200-load-{width}.txt").write_text(screen.rstrip() + "\n")
        screen = capture(ADA, width)
        (out / f"rtx4000-processes-{width}.txt").write_text(screen.rstrip() + "\n")


if __name__ == "__main__":
    main()

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


def capture(replay: Path, width: int, extra: tuple[str, ...] = (), height: int = 30) -> str:
    """Start `dlrig monitor` on the replay in a detached tmux of `width` columns, wait for the
    second frame, and return the screen as tmux shows it."""
    tmux = shutil.which("tmux")
    assert tmux, "tmux is installed by make test (.ci/system-packages.txt)"
    session = f"dlrig-{uuid.uuid4().hex[:8]}"
    socket = f"{session}-socket"  # a server of its own: a killed one may still be exiting
    command = " ".join(
        [
            sys.executable,
            "-m",
            "dlrig.cli.main",
            "monitor",
            "--replay",
            str(replay),
            "--interval",
            "0.2",
            *extra,
        ]
    )
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("COLUMNS", None)
    subprocess.run(
        [
            tmux,
            "-L",
            socket,
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            str(width),
            "-y",
            str(height),
            "-c",
            str(ROOT),
            command,
        ],
        check=True,
        env=env,
    )
    try:
        screen = ""
        while "»" not in screen or "PCIe" not in screen:  # pytest-timeout bounds the wait
            time.sleep(0.3)
            screen = subprocess.run(
                [tmux, "-L", socket, "capture-pane", "-p", "-t", session],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        time.sleep(0.5)  # one frame more: the sparkline has two points
        return subprocess.run(
            [tmux, "-L", socket, "capture-pane", "-p", "-t", session],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    finally:
        subprocess.run([tmux, "-L", socket, "kill-server"], check=False, capture_output=True)


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
    tmux = shutil.which("tmux")
    assert tmux
    session = f"dlrig-{uuid.uuid4().hex[:8]}"
    socket = f"{session}-socket"
    encode = NVSMI / "rtx4080super-capture-idle-load.txt"  # seven processes under load
    command = " ".join(
        [
            sys.executable,
            "-m",
            "dlrig.cli.main",
            "monitor",
            "--replay",
            str(encode),
            "--replay-state",
            "load",
            "--interval",
            "0.2",
            ";",
            "echo",
            "EXIT=$?",
            ";",
            "sleep",
            "60",
        ]
    )
    env = {**os.environ, "TERM": "xterm-256color"}

    def tmux_run(*args: str) -> str:
        return subprocess.run(
            [tmux, "-L", socket, *args], check=True, capture_output=True, text=True, env=env
        ).stdout

    def screen_when(text: str, escapes: bool = False) -> str:
        screen = ""
        while text not in screen:  # pytest-timeout bounds the wait
            time.sleep(0.2)
            screen = tmux_run("capture-pane", "-p", *(["-e"] if escapes else []), "-t", session)
        return screen

    tmux_run("new-session", "-d", "-s", session, "-x", "140", "-y", "30", "-c", str(ROOT), command)
    try:
        screen_when("keys: ")
        tmux_run("send-keys", "-t", session, "Down", "Down", "s")
        screen = screen_when("[sort: gpu-memory]", escapes=True)
        # The second row (pid 5021, the second ffmpeg) is drawn in reverse video: selected.
        [row] = [line for line in screen.splitlines() if " 5021 " in line]
        assert "\x1b[7m" in row, screen
        tmux_run("send-keys", "-t", session, "K")
        screen_when("no SIGKILL sent: a replay's processes are not on this machine")
        tmux_run("send-keys", "-t", session, "q")
        screen_when("EXIT=0")
    finally:
        subprocess.run([tmux, "-L", socket, "kill-server"], check=False, capture_output=True)


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

"""Killed and resumed, every way a run ends early, then resumed to the end: the weights of a run
that was never interrupted, bit for bit (CPU, one thread).

One run of tests/data/train_scripts/resumable.py is stopped three times, each resume
continuing from what the last stop left:

1. Ctrl-C at the terminal of `dlrig train` (a real pty, so the kernel sends SIGINT to the whole
   foreground group): a checkpoint of the step, exit 130;
2. `kill -9` of `dlrig train`: the kernel sends its child SIGTERM (PR_SET_PDEATHSIG), as Slurm
   does on preemption; the script writes a checkpoint and exits 143; nothing is left running
   and nothing of dlrig's in the temporary folder;
3. `kill -9` of the script at a random step: it resumes from the last periodic checkpoint.

The script waits at a given step (`--hold-at`) for the signal, so each stop lands at a known
step however loaded the machine is: what is asserted is where each checkpoint is, never how
long anything took (the timeouts are only there so that nothing hangs).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT
from tests.terminal import Terminal

pytestmark = pytest.mark.integration
SCRIPT = ROOT / "tests" / "data" / "train_scripts" / "resumable.py"
STEPS = 30
EVERY = 4  # periodic checkpoints (phase 4 resumes from one of them)
TIMEOUT_S = 300  # per phase; a phase starts torch, on a machine at a load of 10


def _script_args(checkpoints: Path, out: Path, *extra: str) -> list[str]:
    return [
        str(SCRIPT),
        "--checkpoint-dir",
        str(checkpoints),
        "--out",
        str(out),
        "--steps",
        str(STEPS),
        *extra,
    ]


def _env(tmp: Path | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.pop("DLRIG_DEBUG", None)
    if tmp is not None:
        env["TMPDIR"] = str(tmp)  # where a temporary folder of dlrig's would appear
    return env


def _start(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    # stderr to a file: nobody reads it while the test waits on stdout, and a full pipe
    # would stop the run.
    return subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=tempfile.TemporaryFile("w+"),
        text=True,
        env=env or _env(),
        cwd=ROOT,
    )


def _stderr(process: subprocess.Popen[str]) -> str:
    stream = process.stderr
    if stream is None:
        return ""
    stream.seek(0)
    return stream.read()[-3000:]


def _wait_for_line(process: subprocess.Popen[str], wanted: str) -> None:
    """Read the run's stdout until `wanted`; a timer kills it if that never comes."""
    assert process.stdout is not None
    timer = threading.Timer(TIMEOUT_S, process.kill)
    timer.start()
    try:
        for line in process.stdout:
            if line.strip() == wanted:
                return
    finally:
        timer.cancel()
    process.wait(timeout=30)
    raise AssertionError(f"no {wanted!r} (exit {process.returncode}): {_stderr(process)}")


def _finish(process: subprocess.Popen[str]) -> None:
    stdout, _ = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 0, _stderr(process)
    assert stdout.strip().endswith("done")


def _latest(checkpoints: Path) -> int:
    return int((checkpoints / "latest").read_text().strip().removeprefix("step-"))


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_every_way_of_stopping_resumes_bit_for_bit(tmp_path):
    checkpoints = tmp_path / "ckpt"
    unused = tmp_path / "unused.pt"
    dlrig_train = [sys.executable, "-m", "dlrig.cli.main", "train"]
    final = ("--every", "100")  # checkpoints cost fsyncs, and do not change the weights
    # The reference runs beside the first phases: nothing of it is shared with them.
    straight = _start(
        [sys.executable, *_script_args(tmp_path / "straight", tmp_path / "ref.pt", *final)]
    )

    stop = ("--sigterm", "--every", "100")  # no periodic checkpoint: each is the signal's
    # 1. Ctrl-C at dlrig train's terminal: one SIGINT reaches dlrig and the script (dlrig does
    # not send it a second, which would stop it before its checkpoint), exit 130.
    terminal = Terminal(
        [*dlrig_train, "--json", *_script_args(checkpoints, unused, *stop, "--hold-at", "5")],
        _env(),
        ROOT,
    )
    terminal.wait_for_line("step 5")
    terminal.type(b"\x03")
    assert terminal.wait() == 130, terminal.output.decode()[-2000:]
    assert _latest(checkpoints) == 6
    # dlrig train's document says how the run ended and where its checkpoint is.
    printed = terminal.output.decode().replace("\r\n", "\n")
    document = json.loads(printed[printed.rindex('{\n  "schema": "dlrig.train"') :])
    assert document["exit_code"] == 130 and document["summary"]["stopped_by"] == "SIGINT"
    assert document["summary"]["last_checkpoint"] == str(checkpoints / "step-00000006")

    # 2. kill -9 of dlrig train: its child gets SIGTERM from the kernel and checkpoints.
    temporary = tmp_path / "tmpdir"
    temporary.mkdir()
    launcher = _start(
        [*dlrig_train, *_script_args(checkpoints, unused, *stop, "--hold-at", "8")],
        _env(temporary),
    )
    _wait_for_line(launcher, "step 8")
    (child,) = _children(launcher.pid)
    launcher.kill()
    launcher.wait(timeout=TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child), "the training process outlived a killed dlrig train"
    assert _latest(checkpoints) == 9, _stderr(launcher)
    assert [p.name for p in temporary.iterdir() if p.name.startswith("dlrig-train-")] == []
    launcher.communicate(timeout=TIMEOUT_S)

    # 3. kill -9 of the script at a random step: back to the last periodic checkpoint.
    seed = random.randrange(1 << 30)
    kill_at = random.Random(seed).randrange(13, STEPS - 1)  # periodic ones from step 12
    print(f"seed {seed}: kill -9 after step {kill_at}")
    periodic = ("--every", str(EVERY), "--hold-at", str(kill_at))
    script = _start([sys.executable, *_script_args(checkpoints, unused, *periodic)])
    _wait_for_line(script, f"step {kill_at}")
    script.kill()
    script.communicate(timeout=TIMEOUT_S)
    assert script.returncode == -signal.SIGKILL
    assert _latest(checkpoints) == kill_at - kill_at % EVERY

    # 4. Resumed to the end: the weights of the run that was never interrupted.
    _finish(_start([sys.executable, *_script_args(checkpoints, tmp_path / "weights.pt", *final)]))
    _finish(straight)
    _assert_same(torch.load(tmp_path / "ref.pt"), torch.load(tmp_path / "weights.pt"))

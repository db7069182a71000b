"""Killed and resumed: SIGTERM, then `kill -9` at a random step, then a resume, gives the weights
of a run that was never interrupted, bit for bit (CPU, one thread). SIGTERM writes a checkpoint
before exiting with 143."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT

pytestmark = pytest.mark.integration
SCRIPT = ROOT / "tests" / "data" / "train_scripts" / "resumable.py"
STEPS = 30


def _start(checkpoint_dir, out, *extra: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            "--checkpoint-dir",
            str(checkpoint_dir),
            "--out",
            str(out),
            "--steps",
            str(STEPS),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def _finish(process: subprocess.Popen[str]) -> None:
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr[-3000:]
    assert stdout.strip().endswith("done")


def _wait_for_step(process: subprocess.Popen[str], step: int) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        if line.strip() == f"step {step}":
            return
    raise AssertionError(f"the run ended before step {step}: {process.stderr.read()[-2000:]}")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("straight")
    _finish(_start(folder / "ckpt", folder / "weights.pt"))
    return torch.load(folder / "weights.pt")


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_sigterm_then_kill_9_at_a_random_step_then_resume_is_bit_for_bit(tmp_path, uninterrupted):
    checkpoints = tmp_path / "ckpt"
    # 1. SIGTERM (Slurm preemption): a checkpoint of the step it was at, then exit 143.
    first = _start(
        checkpoints, tmp_path / "unused.pt", "--sigterm", "--sleep", "0.02", "--every", "100"
    )
    _wait_for_step(first, 5)
    first.send_signal(signal.SIGTERM)
    first.wait(timeout=60)
    assert first.returncode == 143
    latest = (checkpoints / "latest").read_text().strip()
    stopped_at = int(latest.removeprefix("step-"))
    assert stopped_at >= 5  # no periodic checkpoint before step 100: SIGTERM wrote it
    # 2. Resumed, then kill -9 at a random later step (periodic checkpoints every 4 steps).
    seed = random.randrange(1 << 30)
    kill_at = random.Random(seed).randrange(stopped_at + 2, STEPS - 1)
    print(f"seed {seed}: SIGTERM at step {stopped_at}, kill -9 after step {kill_at}")
    second = _start(checkpoints, tmp_path / "unused.pt", "--sleep", "0.02")
    _wait_for_step(second, kill_at)
    second.send_signal(signal.SIGKILL)
    second.wait(timeout=30)
    assert second.returncode == -signal.SIGKILL
    # 3. Resumed to the end: the weights of a run that was never interrupted.
    _finish(_start(checkpoints, tmp_path / "weights.pt"))
    _assert_same(uninterrupted, torch.load(tmp_path / "weights.pt"))

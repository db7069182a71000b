"""The generated sbatch script on a real two-node Slurm cluster: srun -> torchrun -> one gloo
rank per node, to the loss a single process reaches on the full batch."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.slurm_cluster import slurm_cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration
HERE = Path(__file__).resolve().parent


def _reference_loss() -> float:
    out = subprocess.run(
        [sys.executable, str(HERE / "ddp_train.py"), "--reference"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return float(re.search(r"final_loss=([\d.]+)", out).group(1))


def test_generated_sbatch_runs_ddp_across_both_nodes(slurm_cluster, tmp_path, run_dlrig):  # noqa: F811
    shutil.copy(HERE / "ddp_train.py", tmp_path / "ddp_train.py")
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    result = run_dlrig(
        "provision",
        "launch",
        "ddp_train.py",
        "--scheduler",
        "slurm",
        "--nodes",
        "2",
        "--gpus-per-node",
        "1",
        "--torchrun",
        torchrun,
        "--cpus-per-task",
        "1",
        "--time",
        "00:05:00",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    script = tmp_path / "train.sbatch"
    text = script.read_text()
    assert "localhost" not in text and "--nnodes=2" not in text
    job = slurm_cluster.sbatch(script, cwd=tmp_path, timeout_s=150)
    assert job.state == "COMPLETED", job.stdout + slurm_cluster.logs()
    finals = dict(re.findall(r"rank=(\d) world=2 node=(n\d)", job.stdout))
    assert sorted(finals.values()) == ["n1", "n2"], job.stdout  # one rank on each node
    losses = [float(v) for v in re.findall(r"final_loss=([\d.]+)", job.stdout)]
    assert len(losses) == 2
    expected = _reference_loss()
    assert all(abs(loss - expected) < 1e-4 for loss in losses), (losses, expected)

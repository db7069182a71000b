"""Under Slurm: the sbatch `dlrig provision launch` generates runs a dlrig.train script on the
two-node test cluster (srun -> torchrun -> one gloo rank per node, accumulation on each)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT
from tests.integration.slurm_cluster import slurm_cluster  # noqa: F401  (fixture)

# One Slurm cluster per session: every test that uses it runs on the same xdist worker.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("slurm")]
SCRIPT = ROOT / "tests" / "data" / "train_scripts" / "slurm_train.py"


def _reference_weights() -> str:
    """One process, the whole batch, the plain loop: the script's own reference, run here
    (the test process has torch already; a process more would only add its start-up)."""
    spec = importlib.util.spec_from_file_location("slurm_train", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the script runs
    try:
        return str(module.weights_text(module.reference()))
    finally:
        torch.set_num_threads(threads)


def test_provision_launch_sbatch_runs_a_dlrig_train_script(slurm_cluster, tmp_path, run_dlrig):  # noqa: F811
    shutil.copy(SCRIPT, tmp_path / "slurm_train.py")
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    made = run_dlrig(
        "provision",
        "launch",
        "slurm_train.py",
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
    assert made.returncode == 0, made.stderr
    job = slurm_cluster.sbatch(tmp_path / "train.sbatch", cwd=tmp_path, timeout_s=150)
    assert job.state == "COMPLETED", job.stdout + slurm_cluster.logs()
    ranks = re.findall(r"rank=(\d) world=2 node=\S+ steps=6 accumulation=2", job.stdout)
    assert sorted(ranks) == ["0", "1"], job.stdout
    assert "global batch 16 = 2 ranks × 2 micro-steps × 4 samples" in job.stdout
    expected = _reference_weights()
    trained = re.findall(r"weights=(\S+)", job.stdout)
    assert len(trained) == 2 and set(trained) == {expected}, job.stdout

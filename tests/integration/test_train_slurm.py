"""Under Slurm: the sbatch `dlrig provision launch` generates runs a dlrig.train script on the
two-node test cluster (srun -> torchrun -> one gloo rank per node, accumulation on each)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.integration.slurm_cluster import slurm_cluster  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration
SCRIPT = ROOT / "tests" / "data" / "train_scripts" / "slurm_train.py"


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
    reference = subprocess.run(
        [sys.executable, str(SCRIPT), "--reference"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    expected = re.search(r"weights=(\S+)", reference).group(1)
    trained = re.findall(r"weights=(\S+)", job.stdout)
    assert len(trained) == 2 and set(trained) == {expected}, job.stdout

"""The generated sbatch script on a real two-node Slurm cluster: srun -> torchrun -> one gloo
rank per node, to the loss a single process reaches on the full batch."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.slurm_cluster import slurm_cluster  # noqa: F401  (fixture)

# One Slurm cluster per session: every test that uses it runs on the same xdist worker.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("slurm")]
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
    """Also checks, on the real cluster: the srun step gets the job's CPUs per task (Slurm
    22.05+ does not pass sbatch's --cpus-per-task on), the rendezvous address is the head
    node's NodeAddr, and script options after SCRIPT reach the script."""
    shutil.copy(HERE / "ddp_train.py", tmp_path / "ddp_train.py")
    with socket.socket() as probe:  # a free port: 29500 may be taken by another job here
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    result = run_dlrig(
        "provision",
        "launch",
        "ddp_train.py",
        "--report-step",  # a script option after SCRIPT, passed through without `--`
        "--scheduler",
        "slurm",
        "--nodes",
        "2",
        "--gpus-per-node",
        "1",
        "--torchrun",
        torchrun,
        "--cpus-per-task",
        "2",
        "--rdzv-port",
        str(port),
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
    # slurmctld records 2 CPUs per task for the srun step, 4 for the 2-node step. Without the
    # fix (Slurm 22.05+ srun does not inherit sbatch's --cpus-per-task) it records no
    # TresPerTask and cpu:2 for the step: measured on this cluster with the same script minus
    # SRUN_CPUS_PER_TASK and srun's --cpus-per-task.
    steps = re.findall(r"step=\S+ node=(n\d) cpus_per_task=(\S+) step_cpus=(\S+)", job.stdout)
    assert sorted(steps) == [("n1", "2", "4"), ("n2", "2", "4")], job.stdout
    head = re.search(r"rendezvous at (\S+):\d+", job.stdout).group(1)
    node_addr = re.search(
        r"NodeAddr=(\S+)", slurm_cluster.run(["scontrol", "show", "node", "n1"]).stdout
    ).group(1)
    assert head == node_addr and head != "127.0.1.1", job.stdout
    losses = [float(v) for v in re.findall(r"final_loss=([\d.]+)", job.stdout)]
    assert len(losses) == 2
    expected = _reference_loss()
    assert all(abs(loss - expected) < 1e-4 for loss in losses), (losses, expected)


def test_without_cpu_facts_the_request_fits_the_nodes_sinfo_reports(
    slurm_cluster,  # noqa: F811
    tmp_path,
    run_dlrig,
):
    # Before, no facts meant --cpus-per-task=4 per process: on these 2-CPU nodes the job
    # pended for ever ("Resources"). Now sinfo's smallest node caps it, and it runs.
    shutil.copy(HERE / "ddp_train.py", tmp_path / "ddp_train.py")
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    result = run_dlrig(
        "provision", "launch", "ddp_train.py", "--scheduler", "slurm", "--nodes", "2",
        "--gpus-per-node", "1", "--torchrun", torchrun, "--time", "00:05:00",
        "--out", str(tmp_path), "--json",
        env=slurm_cluster.env(),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "train.sbatch").read_text()
    cpus = int(re.search(r"#SBATCH --cpus-per-task=(\d+)", text).group(1))
    assert cpus == slurm_cluster.cpus_per_node, text
    assert "(sinfo)" in result.stdout
    job = slurm_cluster.sbatch(tmp_path / "train.sbatch", cwd=tmp_path, timeout_s=150)
    assert job.state == "COMPLETED", job.stdout + slurm_cluster.logs()

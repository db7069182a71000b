"""The generated power scripts run for real: the Slurm power-saving script as an unprivileged
SlurmUser with the IPMI password file, and the nightly sleep on the real two-node Slurm
cluster with a job running on one node. ipmitool is the real one; there is no BMC here, so
each run ends at ipmitool's own "Address lookup ... failed" for the node it did try to power
off: that shows which nodes reached the power-off and that the credentials were readable."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from dlrig import provision
from dlrig.provision.power import PowerOptions
from tests.integration.slurm_cluster import slurm_cluster  # noqa: F401  (fixture)

pytestmark = [
    pytest.mark.integration,
    pytest.mark.xdist_group("slurm"),  # the session's one Slurm cluster: one xdist worker
    pytest.mark.skipif(os.geteuid() != 0, reason="runs scripts as another user: needs root"),
]


@pytest.fixture
def power_dir():
    """The generated files in a folder an unprivileged user can traverse (pytest's are 0700)."""
    assert shutil.which("ipmitool"), "ipmitool is missing: make system"
    folder = Path(tempfile.mkdtemp(prefix="dlrig-power-", dir="/tmp"))
    folder.chmod(0o755)
    facts = provision.gather(None, provision.Stated(gpu="rtx-3090"), probe=False)
    bundle = provision.generate(
        "power",
        facts,
        options=PowerOptions(
            nodes=("n1", "n2"),
            install_dir=str(folder),
            password_file=str(folder / "ipmi.password"),
        ),
    )
    provision.write(bundle, folder, overwrite=True)
    for script in folder.glob("*.sh"):
        script.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _as_nobody(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run as SlurmUser would: an unprivileged user (nobody) in its own group (nogroup)."""
    return subprocess.run(
        ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_slurm_suspend_reads_the_password_file_as_slurm_user(slurm_cluster, power_dir):  # noqa: F811
    password = power_dir / "ipmi.password"
    password.write_text("not-a-real-password\n")
    env = slurm_cluster.env()
    suspend = [str(power_dir / "dlrig-slurm-suspend.sh"), "n[1-2]"]

    password.chmod(0o600)  # root only: what the scripts used to document
    refused = _as_nobody(suspend, env)
    assert refused.returncode == 1 and "cannot read" in refused.stderr, refused

    os.chown(password, 0, 65534)  # root:nogroup, 0640 - the SlurmUser's group may read it
    password.chmod(0o640)
    allowed = _as_nobody(suspend, env)
    # Past the credentials: the real ipmitool tried the first node's BMC, which does not exist.
    assert "cannot read" not in allowed.stderr, allowed.stderr
    assert "Address lookup for n1-bmc failed" in allowed.stderr, allowed.stderr


def _running(slurm_cluster, job_id: str, timeout_s: float = 30) -> None:  # noqa: F811
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = slurm_cluster.run(["squeue", "-h", "-j", job_id, "-o", "%T"]).stdout.strip()
        if state == "RUNNING":
            return
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not start: {state}")


def _reason(slurm_cluster, node: str) -> str:  # noqa: F811
    shown = slurm_cluster.run(["scontrol", "show", "node", node]).stdout
    state = shown.split("State=", 1)[1].split()[0]
    reason = shown.split("Reason=", 1)[1].split("[")[0].strip() if "Reason=" in shown else ""
    return f"{state} {reason}"


def test_night_sleep_leaves_a_node_with_a_running_job_on(slurm_cluster, power_dir, tmp_path):  # noqa: F811
    password = power_dir / "ipmi.password"
    password.write_text("not-a-real-password\n")
    password.chmod(0o600)
    job = slurm_cluster.run(
        ["sbatch", "--parsable", "-N1", "-w", "n2", "--output=/dev/null", "--wrap", "sleep 120"],
        cwd=power_dir,
    ).stdout.strip()
    try:
        _running(slurm_cluster, job)
        result = subprocess.run(
            [str(power_dir / "dlrig-ipmi-power.sh"), "sleep", "n2", "n1"],
            capture_output=True,
            text=True,
            timeout=60,
            env=slurm_cluster.env(),
        )
        # n2 runs a job: drained (no new job starts) and left on; n1 is idle: drained, then
        # the power-off was tried (ipmitool reached its BMC lookup).
        assert f"n2: job(s) {job} running: drained (no new jobs), left on" in result.stdout, result
        assert "Address lookup for n1-bmc failed" in result.stderr, result
        assert "n2-bmc" not in result.stderr
        for node in ("n1", "n2"):
            state = _reason(slurm_cluster, node)
            assert "DRAIN" in state and "dlrig night sleep" in state, (node, state)
        squeue = slurm_cluster.run(["squeue", "-h", "-j", job, "-o", "%T"]).stdout.strip()
        assert squeue == "RUNNING"  # the job on n2 was not touched
    finally:
        slurm_cluster.run(["scancel", job], check=False)
        for node in ("n1", "n2"):
            slurm_cluster.set_node_state(node, "resume")

"""`dlrig health --slurm` as the HealthCheckProgram of a real two-node Slurm cluster.

slurmd runs the program on both nodes every few seconds, with SLURMD_NODENAME set (and nothing
else: the wrapper gives it PATH and SLURM_CONF). Each node judges a recorded input the test swaps
under it: a healthy nvidia-smi capture, a real dmesg with hardware Xid 119 (GSP RPC timeout,
leptonai/gpud's test data), or a real kernel log with application Xid 31 only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import CORPUS, NVSMI, ROOT
from tests.integration.slurm_cluster import SlurmCluster, missing_programs

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.xdist_group("slurm")]

HEALTHY = NVSMI / "rtx3090-q-x.xml"
HARDWARE_XID = NVSMI / "dmesg-xid119-gsp-rpc-timeout.log"
APPLICATION_XID = CORPUS / "logs" / "xid_error" / "tf-models-objdet-killed-xid31.log"
INTERVAL_S = 3


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[SlurmCluster, Path]]:
    if missing_programs() or os.geteuid() != 0:
        pytest.fail("the Slurm test cluster needs munge/slurmctld/slurmd and root: make system")
    root = Path(tempfile.mkdtemp(prefix="dlrig-health-"))
    os.chmod(root, 0o755)
    feeds = root / "health"
    feeds.mkdir()
    for node in ("n1", "n2"):
        (feeds / node).symlink_to(HEALTHY)
    (root / "etc").mkdir()
    wrapper = root / "etc" / "health.sh"
    # slurmd passes SLURMD_NODENAME alone: the program brings its own PATH and SLURM_CONF.
    wrapper.write_text(
        "#!/bin/sh\n"
        f"export PATH={os.environ['PATH']}\n"
        f"export SLURM_CONF={root}/etc/slurm.conf\n"
        f"cd {ROOT}\n"
        f'exec {sys.executable} -m dlrig.cli.main health --slurm --node "$SLURMD_NODENAME" '
        f'--from "{feeds}/$SLURMD_NODENAME" --budget 20 '
        f'>> "{root}/log/health-$SLURMD_NODENAME.out" 2>&1\n'
    )
    wrapper.chmod(0o755)
    extra = (f"HealthCheckProgram={wrapper}", f"HealthCheckInterval={INTERVAL_S}")
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        yield stack.enter_context(SlurmCluster.start(root, extra_config=extra)), feeds


def _feed(feeds: Path, node: str, source: Path) -> None:
    link = feeds / node
    temporary = feeds / f".{node}.new"
    temporary.unlink(missing_ok=True)
    temporary.symlink_to(source)
    temporary.replace(link)  # the next check reads the whole new input, never half of it


def _node(cluster: SlurmCluster, node: str) -> tuple[str, str]:
    shown = cluster.run(["scontrol", "show", "node", node, "-o"]).stdout
    state = shown.split("State=", 1)[1].split()[0]
    reason = shown.split("Reason=", 1)[1].split(" [")[0] if "Reason=" in shown else ""
    return state, reason


def _wait(
    cluster: SlurmCluster, node: str, drained: bool, timeout_s: float = 30
) -> tuple[str, str]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state, reason = _node(cluster, node)
        if ("DRAIN" in state) == drained:
            return state, reason
        time.sleep(0.5)
    raise AssertionError(
        f"{node} did not become {'drained' if drained else 'usable'}: {state} "
        f"{reason}\n" + cluster.logs() + _health_log(cluster, node)
    )


def _health_log(cluster: SlurmCluster, node: str) -> str:
    path = cluster.root / "log" / f"health-{node}.out"
    return path.read_text()[-2000:] if path.exists() else "(no health log)"


def test_the_health_check_drains_resumes_and_keeps_a_persons_reason(cluster):
    slurm, feeds = cluster
    _wait(slurm, "n1", drained=False)
    _wait(slurm, "n2", drained=False)

    # A hardware fault recorded on n2: its own check drains it, saying why.
    _feed(feeds, "n2", HARDWARE_XID)
    state, reason = _wait(slurm, "n2", drained=True)
    assert reason.startswith("dlrig: gpu.xid: Xid 119 (GSP RPC Timeout)"), reason

    # Jobs land only on the healthy node.
    for _ in range(3):
        ran = slurm.run(["srun", "-N1", "-n1", "sh", "-c", "echo $SLURMD_NODENAME"]).stdout
        assert ran.strip() == "n1"

    # `doctor --fleet` says which node dlrig drained, and why.
    fleet = slurm.run(
        [sys.executable, "-m", "dlrig.cli.main", "doctor", "--fleet", "srun", "--json"],
        timeout_s=240,
        cwd=ROOT,
        check=False,
    )
    nodes = {n["node"]: n for n in json.loads(fleet.stdout)["nodes"]}
    assert nodes["n2"]["state"] == "drained"
    assert nodes["n2"]["detail"].startswith("drained by dlrig health: dlrig: gpu.xid"), nodes["n2"]

    # The fault cleared (the node rebooted, the recording is healthy again): resumed.
    _feed(feeds, "n2", HEALTHY)
    _wait(slurm, "n2", drained=False)

    # A reason a person set is never overwritten nor resumed by a healthy check.
    slurm.set_node_state("n1", "drain", reason="maintenance: alice")
    time.sleep(3 * INTERVAL_S)
    state, reason = _node(slurm, "n1")
    assert "DRAIN" in state and reason == "maintenance: alice", (state, reason)
    slurm.set_node_state("n1", "resume")

    # An application's Xid (31: a page fault of the program) drains nothing.
    _feed(feeds, "n2", APPLICATION_XID)
    time.sleep(3 * INTERVAL_S)
    state, reason = _node(slurm, "n2")
    assert "DRAIN" not in state, (state, reason, _health_log(slurm, "n2"))
    assert "warnings only" in _health_log(slurm, "n2")

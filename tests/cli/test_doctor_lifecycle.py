"""`dlrig doctor` is bounded by its deadline even when a probe never returns.

A stuck NVML call or an NFS `statvfs` on a dead server blocks its thread forever. Before the
probes ran on daemon threads, doctor printed its report at the deadline and then hung at exit,
joining the stuck worker. Here one probe really blocks (in a real `dlrig doctor` process).
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

HUNG_PROBE = """
import threading, sys
import dlrig.machine.host as host
never = threading.Event()
host.limits = lambda: never.wait()   # a call that never returns, like a hung NVML ioctl
from dlrig.cli.main import main
main(["doctor", "--json", "--timeout", "0.5"])
"""


def test_a_hung_probe_is_reported_and_doctor_still_exits():
    done = subprocess.run(
        [sys.executable, "-c", HUNG_PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode in (0, 1), done.stderr
    document = json.loads(done.stdout)
    issues = {issue["source"]: issue["reason"] for issue in document["machine"]["probe_issues"]}
    assert "did not finish" in issues["limits"]

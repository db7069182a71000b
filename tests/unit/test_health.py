"""`dlrig health`: which faults drain a node, within a budget, in each scheduler's words.

Inputs are recorded outputs: nvidia-smi captures (tests/fixtures/nvidia-smi) and kernel logs of
real machines (gpud's dmesg with Xid 119, a thread's Xid 31, a journal with Xid 79).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from dlrig import health, provision
from dlrig.health import outputs, slurm
from dlrig.machine import readers
from dlrig.machine.model import KernelLog
from dlrig.machine.probe import collect_health
from dlrig.machine.runner import CommandResult, ProbeContext
from tests.conftest import CORPUS, NVSMI, ROOT

HEALTHY = NVSMI / "rtx3090-q-x.xml"
HARDWARE_XID = NVSMI / "dmesg-xid119-gsp-rpc-timeout.log"
FELL_OFF = CORPUS / "logs" / "gpu_fell_off_bus" / "open-gpu-kmod-5070ti-xid79-journal.log"
APPLICATION_XID = CORPUS / "logs" / "xid_error" / "tf-models-objdet-killed-xid31.log"
T4_WITH_PROCESS = NVSMI / "tesla-t4-2procs-q-x.xml"
SCHEMAS = ROOT / "tests" / "data" / "schemas"


def _check(*paths: Path, **options: object) -> health.HealthReport:
    machine = readers.load_many(list(paths))
    return health.run(health.HealthOptions(**options), machine=machine)  # type: ignore[arg-type]


def test_hardware_xids_drain_and_application_xids_do_not():
    fault = _check(HARDWARE_XID)
    assert fault.status == "fault" and fault.draining[0].check == "gpu.xid"
    assert fault.drain_reason.startswith("dlrig: gpu.xid: Xid 119 (GSP RPC Timeout)")
    assert len(fault.drain_reason) <= health.REASON_CHARS
    fell = _check(FELL_OFF)
    assert fell.status == "fault" and fell.draining[0].cause == "gpu_fell_off_bus"
    app = _check(APPLICATION_XID)
    assert app.status == "warn" and not app.draining  # Xid 31: the program's page fault
    assert _check(HEALTHY).status == "ok"


def test_epilog_drains_a_gpu_left_with_a_process_and_periodic_does_not():
    assert _check(T4_WITH_PROCESS, mode="epilog").status == "fault"
    assert any(
        f.check == "gpu.stray_processes" for f in _check(T4_WITH_PROCESS, mode="epilog").faults
    )
    assert not _check(T4_WITH_PROCESS).draining  # during a job, processes are the job


def test_a_missing_gpu_drains():
    report = _check(HEALTHY, expect_gpus=2)
    assert report.status == "fault" and report.draining[0].check == "gpu.count"


def test_an_xid_counts_once_per_boot_and_a_reboot_clears_it(tmp_path):
    # live snapshots carry a boot id: the event opens a fault that stays open until a new boot
    live = readers.load(HARDWARE_XID)
    live = type(live)(**{**live.__dict__, "origin": type(live.origin)(kind="live", boot_id="b1")})
    options = health.HealthOptions(state_path=tmp_path / "state.json")
    first = health.run(options, machine=live)
    assert first.status == "fault"
    again = health.run(options, machine=live)  # same log, same boot: still drained, read once
    assert again.status == "fault"
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["boot_id"] == "b1" and len(state["open_faults"]) == 1
    rebooted = type(live)(
        **{
            **live.__dict__,
            "origin": type(live.origin)(kind="live", boot_id="b2"),
            "kernel_log": KernelLog(),
        }
    )
    assert health.run(options, machine=rebooted).status == "ok"
    # a person's --clear forgets what the log showed, and the old lines do not come back
    health.run(options, machine=live)
    cleared = health.run(
        health.HealthOptions(state_path=tmp_path / "state.json", clear=True), machine=live
    )
    assert cleared.status == "ok", cleared.faults


class _HangingRunner:
    """A machine whose commands never return (a hung filesystem, a stuck dmesg)."""

    def run(self, argv, timeout_s, env=None):
        time.sleep(600)
        return CommandResult(tuple(argv), None, error="unreachable")

    def which(self, name):
        return "/usr/bin/" + name


def test_the_check_keeps_its_budget_with_a_hung_probe():
    started = time.monotonic()
    report = health.run(
        health.HealthOptions(budget_s=2.0),
        collect=lambda deadline: collect_health(ProbeContext(runner=_HangingRunner()), deadline),
    )
    elapsed = time.monotonic() - started
    assert elapsed < 2.0, elapsed
    assert report.status == "unknown" and report.note
    # and a probe that never returns at all
    started = time.monotonic()
    stuck = health.run(health.HealthOptions(budget_s=1.5), collect=lambda d: time.sleep(600))  # type: ignore[arg-type, return-value]
    assert time.monotonic() - started < 1.5 and stuck.status == "unknown"


def test_npd_plugin_contract():
    # node-problem-detector: exit 0 OK, 1 NonOK, other Unknown; output cut at 80 characters
    for path, code in ((HEALTHY, 0), (APPLICATION_XID, 0), (HARDWARE_XID, 1)):
        text, exit_code = outputs.npd(_check(path))
        assert exit_code == code and len(text) <= outputs.NPD_OUTPUT_CHARS and "\n" not in text
    unknown = health.HealthReport("periodic", "unknown", (), "live", 2.0, note="x" * 300)
    text, code = outputs.npd(unknown)
    assert code == 2 and len(text) == outputs.NPD_OUTPUT_CHARS


def test_npd_cli_exit_codes_and_first_line():
    for path, code in ((HEALTHY, 0), (HARDWARE_XID, 1)):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "dlrig.cli.main",
                "health",
                "--format",
                "npd",
                "--from",
                str(path),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert done.returncode == code, done.stderr
        assert len(done.stdout.splitlines()[0]) <= 80


def test_nagios_and_the_textfile():
    text, code = outputs.nagios(_check(HARDWARE_XID))
    assert (
        code == 2 and text.startswith("DLRIG HEALTH CRITICAL: gpu.xid") and " | faults=1;" in text
    )
    assert outputs.nagios(_check(APPLICATION_XID))[1] == 1
    assert outputs.nagios(_check(HEALTHY))[1] == 0
    prom = outputs.prometheus(_check(HARDWARE_XID))
    assert 'dlrig_health_status{mode="periodic"} 2' in prom
    assert 'dlrig_health_faults{check="gpu.xid",drain="true"} 1' in prom
    from prometheus_client.parser import text_string_to_metric_families

    names = {family.name for family in text_string_to_metric_families(prom)}
    assert {"dlrig_health_status", "dlrig_health_faults", "dlrig_health_check_seconds"} <= names


def test_slurm_decisions_never_overwrite_a_persons_reason():
    fault, ok = _check(HARDWARE_XID), _check(HEALTHY)
    idle = slurm.NodeState("n2", "IDLE", None)
    assert slurm.decide(fault, idle).kind == "drain"
    assert slurm.decide(fault, idle).reason == fault.drain_reason
    person = slurm.NodeState("n2", "IDLE+DRAIN", "maintenance: alice")
    assert slurm.decide(fault, person).kind == "keep"
    assert slurm.decide(ok, person).kind == "keep"
    ours = slurm.NodeState("n2", "IDLE+DRAIN", fault.drain_reason)
    assert slurm.decide(fault, ours).kind == "keep"
    assert slurm.decide(ok, ours).kind == "resume"
    assert slurm.decide(_check(APPLICATION_XID), ours).kind == "resume"  # warnings never drain


class _Recorded:
    def __init__(self, stderr: str, code: int = 1) -> None:
        self.stderr, self.code = stderr, code

    def run(self, argv, timeout_s, env=None):
        return CommandResult(tuple(argv), self.code, "", self.stderr)

    def which(self, name):
        return None


def test_no_permission_to_drain_is_one_line_and_drains_nothing():
    from dlrig.errors import InputError

    # scontrol's words for a non-root caller (slurm src/scontrol/update_node.c)
    runner = _Recorded("slurm_update error: Access/permission denied")
    with pytest.raises(InputError, match="not allowed"):
        slurm.Slurm(runner).apply("n2", slurm.Action("drain", "x", "dlrig: x"))
    with pytest.raises(InputError, match="no Slurm controller answers"):
        slurm.Slurm(_Recorded("slurm_load_node error: Unable to contact slurm controller")).node(
            "n2"
        )


def test_provisioned_slurm_scripts_and_npd_files_validate(tmp_path):
    from tests.unit.test_provision_generators import shellcheck
    from tests.unit.test_provision_manifests import facts

    bundle = provision.write(provision.generate("health", facts()), tmp_path)  # 8x H100
    for name in ("dlrig-health", "dlrig-health-prolog", "dlrig-health-epilog"):
        shellcheck(tmp_path / name)
    conf = bundle.file("slurm-health.conf").content
    assert "HealthCheckProgram=/etc/slurm/dlrig-health" in conf and "Epilog=" in conf
    config = json.loads(bundle.file("npd-dlrig-health.json").content)
    jsonschema.validate(config, json.loads((SCHEMAS / "npd_custom_plugin_config.json").read_text()))

    # node-problem-detector's own Validate(): rule timeouts within the global one, and a
    # permanent rule's condition among the default conditions
    def seconds(text: str) -> float:
        return float(text.rstrip("s"))

    glob = seconds(config["pluginConfig"]["timeout"])
    assert all(seconds(r["timeout"]) <= glob for r in config["rules"])
    types = {c["type"] for c in config["conditions"]}
    assert all(r["condition"] in types for r in config["rules"] if r["type"] == "permanent")
    assert config["rules"][0]["args"][:3] == ["health", "--format", "npd"]
    assert "--expect-gpus" in config["rules"][0]["args"]
    documents = list(yaml.safe_load_all(bundle.file("npd-dlrig-health.yaml").content))
    assert [d["kind"] for d in documents] == ["ConfigMap", "DaemonSet"]
    assert json.loads(documents[0]["data"]["dlrig-health.json"]) == config
    paths = []
    for document in documents:
        path = tmp_path / f"{document['kind']}.yaml"
        path.write_text(yaml.safe_dump(document))
        paths.append(str(path))
    validator = Path(sys.executable).parent / "kubernetes-validate"
    result = subprocess.run(
        [str(validator), "--strict", "-k", "1.32.0", *paths],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_nvml_is_looked_for_in_the_gpu_operators_driver_root(tmp_path):
    # Under NVIDIA's GPU operator the host has no libnvidia-ml.so.1 of its own: it lies under
    # the driver container's root (/run/nvidia/driver), which dlrig tries when the default fails.
    from dlrig.machine import nvml

    assert nvml.DRIVER_ROOTS == ("/run/nvidia/driver",)
    lib = tmp_path / "usr" / "lib64" / "libnvidia-ml.so.1"
    lib.parent.mkdir(parents=True)
    lib.write_bytes(b"")
    other = tmp_path / "usr" / "lib" / "x86_64-linux-gnu" / "libnvidia-ml.so.1"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"")
    assert nvml.driver_root_libraries((str(tmp_path),)) == [other, lib]
    assert nvml.driver_root_libraries((str(tmp_path / "absent"),)) == []


def test_an_nvlink_gpu_without_links_drains_the_board():
    # the recorded H200 reads 18 active links; a second GPU with none is the fabric manager down
    from dataclasses import replace

    from dlrig.machine.model import Topology

    machine = readers.load(NVSMI / "h200-capture-idle-load.txt")
    gpu = machine.gpus[0]
    two = replace(machine, gpus=(gpu, replace(gpu, index=1)))
    fine = health.run(machine=replace(two, topology=Topology(nvlink_active_links=(18, 18))))
    assert not any(f.check == "gpu.nvlink" for f in fine.faults)
    down = health.run(machine=replace(two, topology=Topology(nvlink_active_links=(18, 0))))
    assert down.status == "fault" and down.draining[0].check == "gpu.nvlink"
    assert "fabricmanager" in down.draining[0].title


def test_the_textfile_is_written_whole_for_node_exporter(tmp_path):
    target = tmp_path / "dlrig.prom"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlrig.cli.main",
            "health",
            "--from",
            str(HARDWARE_XID),
            "--textfile",
            str(target),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 1, done.stderr  # a fault that drains
    assert json.loads(done.stdout)["drain"] is True
    assert 'dlrig_health_status{mode="periodic"} 2' in target.read_text()
    assert not list(tmp_path.glob(".*"))  # no temporary file left beside it


def test_a_kernel_log_that_could_not_be_read_is_not_called_healthy():
    machine = readers.load(HEALTHY)
    live = type(machine)(
        **{
            **machine.__dict__,
            "origin": type(machine.origin)(kind="live", boot_id="b"),
            "kernel_log": None,
        }
    )
    report = health.run(machine=live)
    assert report.status == "warn" and report.faults[-1].check == "health.kernel_log"
    assert not report.draining

"""A real Prometheus server scrapes `dlrig monitor serve` replaying recorded GPUs; PromQL through
Prometheus' HTTP API returns the values written in the recordings.

Expected numbers are the recordings' own text (quoted), not dlrig's parse of them.
"""

from __future__ import annotations

import shutil
import time

import pytest

from tests.conftest import NVSMI
from tests.integration.monitor_helpers import Exporter, Prometheus

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None, reason="needs the prometheus binary (.ci/run installs it)"
)

H200 = str(NVSMI / "h200-capture-idle-load.txt")
T4 = str(NVSMI / "tesla-t4-2procs-q-x.xml")
XID = str(NVSMI / "dmesg-xid119-gsp-rpc-timeout.log")
MIB = 2**20


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    import dlrig.monitor.assets as assets

    workdir = tmp_path_factory.mktemp("prometheus")
    rules = workdir / "alerts.yml"
    rules.write_bytes(assets.asset_bytes("alerts.yml"))
    exporters = {
        "h200": Exporter("--replay", H200, "--replay", XID, "--replay-state", "load"),
        "t4": Exporter("--replay", T4, "--interval", "0.5"),
        "dcgm": Exporter("--replay", H200, "--replay-state", "load", "--dcgm-names"),
    }
    prometheus = None
    try:
        prometheus = Prometheus(workdir, {name: e.target for name, e in exporters.items()}, [rules])
        yield prometheus
    finally:
        if prometheus is not None:
            prometheus.stop()
        for exporter in exporters.values():
            exporter.stop()


def _value(result: list[dict]) -> float:
    [series] = result
    return float(series["value"][1])


def test_promql_returns_the_recorded_h200_values(stack: Prometheus) -> None:
    h200 = '{job="h200"}'
    stack.wait_for(f"dlrig_gpu_power_watts{h200}")
    # load query-gpu line: "power.draw [W] = 627.40 W"
    assert _value(stack.query(f"dlrig_gpu_power_watts{h200}")) == pytest.approx(627.40)
    # "utilization.gpu [%] = 100 %" -> a ratio of 1
    assert _value(stack.query(f"dlrig_gpu_utilization_ratio{h200}")) == 1.0
    # "memory.used [MiB] = 32362 MiB", "memory.total [MiB] = 143771 MiB"
    assert _value(stack.query(f"dlrig_gpu_memory_used_bytes{h200}")) == 32362 * MIB
    assert _value(stack.query(f"dlrig_gpu_memory_total_bytes{h200}")) == 143771 * MIB
    # "temperature.gpu = 52", "temperature.memory = 40"
    assert _value(stack.query(f"dlrig_gpu_temperature_celsius{h200}")) == 52
    assert _value(stack.query(f"dlrig_gpu_memory_temperature_celsius{h200}")) == 40
    # "clocks.current.sm [MHz] = 1980 MHz" -> hertz
    assert _value(stack.query(f"dlrig_gpu_sm_clock_hertz{h200}")) == 1980e6
    # "pcie.link.gen.current = 5", "pcie.link.width.current = 16"
    assert _value(stack.query(f"dlrig_gpu_pcie_link_generation{h200}")) == 5
    assert _value(stack.query(f"dlrig_gpu_pcie_link_width{h200}")) == 16
    # "enforced.power.limit [W] = 700.00 W"
    assert _value(stack.query(f"dlrig_gpu_power_limit_watts{h200}")) == 700
    [info] = stack.query(f"dlrig_gpu_info{h200}")
    assert info["metric"]["name"] == "NVIDIA H200"
    assert info["metric"]["pci_bus_id"] == "00000000:83:00.0"
    assert info["metric"]["driver_version"] == "590.48.01"
    # query-compute-apps: "10309, ./gpu_burn, 28234 MiB" among three processes
    assert _value(stack.query(f"dlrig_gpu_processes{h200}")) == 3
    burn = stack.query('dlrig_gpu_process_memory_used_bytes{job="h200",pid="10309"}')
    assert _value(burn) == 28234 * MIB
    assert burn[0]["metric"]["process"] == "./gpu_burn"
    # No clocks event reason active under load ("clocks_event_reasons.active = 0x...0").
    assert _value(stack.query(f"sum(dlrig_gpu_clocks_event_active{h200})")) == 0


def test_xid_is_a_counter_per_code_with_last_seen_time(stack: Prometheus) -> None:
    result = stack.wait_for('dlrig_gpu_xid_errors_total{job="h200"}')
    [series] = result
    # Five "NVRM: Xid (PCI:0000:9b:00): 119" lines in the kernel log.
    assert float(series["value"][1]) == 5
    assert series["metric"]["xid"] == "119"
    assert series["metric"]["severity"] == "critical"
    assert series["metric"]["pci_bus_id"] == "0000:9b:00"
    seen = stack.query('time() - dlrig_gpu_xid_last_seen_timestamp_seconds{job="h200"}')
    assert 0 <= _value(seen) < 120


def test_t4_link_width_downgrade_expression_selects_the_t4(stack: Prometheus) -> None:
    stack.wait_for('dlrig_gpu_pcie_link_width{job="t4"}')
    # <current_link_width>8x</current_link_width> of <max_link_width>16x</max_link_width>
    result = stack.query("dlrig_gpu_pcie_link_width < dlrig_gpu_pcie_link_width_max")
    assert [r["metric"]["job"] for r in result] == ["t4"]
    assert float(result[0]["value"][1]) == 8


def test_dcgm_names_answer_the_dcgm_dashboard_queries(stack: Prometheus) -> None:
    # The queries of dcgm-exporter's Grafana dashboard (grafana/dcgm-exporter-dashboard.json),
    # with its $Hostname and $gpu variables set to "all".
    sel = '{Hostname=~".+", gpu=~".+"}'
    stack.wait_for(f"DCGM_FI_DEV_GPU_TEMP{sel}")
    temp = stack.query(f"max(DCGM_FI_DEV_GPU_TEMP{sel}) by (Hostname, gpu, UUID)")
    assert _value(temp) == 52
    assert temp[0]["metric"]["UUID"] == "GPU-00000000-0000-0000-0000-000000000000"
    assert _value(stack.query(f"max(DCGM_FI_DEV_POWER_USAGE{sel}) by (Hostname, gpu, UUID)")) == (
        pytest.approx(627.40)
    )
    assert _value(stack.query(f"sum(max(DCGM_FI_DEV_POWER_USAGE{sel}) by (gpu))")) == (
        pytest.approx(627.40)
    )
    clocks = stack.query(f"max(DCGM_FI_DEV_SM_CLOCK{sel} * 1000000) by (Hostname, UUID, gpu)")
    assert _value(clocks) == 1980e6
    fb = stack.query(f"max(DCGM_FI_DEV_FB_USED{sel}) by (Hostname, gpu, GPU_I_ID, GPU_I_PROFILE)")
    assert _value(fb) == 32362  # MiB, as dcgm-exporter reports it
    hostnames = stack.api("label/Hostname/values", **{"match[]": "DCGM_FI_DEV_FB_FREE"})
    gpus = stack.api("label/gpu/values", **{"match[]": "DCGM_FI_DEV_FB_FREE"})
    assert len(hostnames) == 1 and gpus == ["0"]
    labels = temp[0]["metric"]
    assert {"Hostname", "gpu", "UUID"} <= set(labels)
    [series] = stack.query("DCGM_FI_DEV_GPU_UTIL")
    assert {"pci_bus_id", "device", "modelName"} <= set(series["metric"])
    assert series["metric"]["modelName"] == "NVIDIA H200"
    assert series["metric"]["device"] == "nvidia0"


def test_shipped_alert_rules_evaluate_cleanly_on_scraped_data(stack: Prometheus) -> None:
    stack.wait_for("dlrig_gpu_up")
    deadline = time.monotonic() + 30
    while True:
        groups = stack.api("rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        if rules and all(rule.get("lastEvaluation", "").startswith("20") for rule in rules):
            break
        assert time.monotonic() < deadline, "rules were not evaluated"
        time.sleep(0.5)
    assert len(rules) == 14
    assert {rule["health"] for rule in rules} == {"ok"}, [
        (rule["name"], rule.get("lastError")) for rule in rules if rule["health"] != "ok"
    ]
    # The Xid rule is immediate (no `for:`): the replayed Xid 119 fires it.
    deadline = time.monotonic() + 30
    while True:
        alerts = stack.api("alerts")["alerts"]
        states = {(a["labels"]["alertname"], a["labels"]["job"]): a["state"] for a in alerts}
        expected = {
            ("DlrigGpuXidCritical", "h200"),
            ("DlrigGpuPcieWidthDowngrade", "t4"),
            ("DlrigGpuLowSmActivity", "t4"),
        }
        if expected <= set(states) and states[("DlrigGpuXidCritical", "h200")] == "firing":
            break
        assert time.monotonic() < deadline, states
        time.sleep(0.5)
    # The T4 (x8 of x16, no kernel running while two processes hold it) has its two alerts
    # pending: they wait out their `for:` time before firing.
    assert states[("DlrigGpuPcieWidthDowngrade", "t4")] == "pending"
    assert states[("DlrigGpuLowSmActivity", "t4")] == "pending"
    assert not any(job == "h200" and name != "DlrigGpuXidCritical" for name, job in states)

"""A real Prometheus server scrapes `dlrig monitor serve` replaying recorded GPUs; PromQL through
Prometheus' HTTP API returns the values written in the recordings, both alert rule sets evaluate
on the scraped series, and every query of both Grafana dashboards runs.

Expected numbers are the recordings' own text (quoted), not dlrig's parse of them. Prometheus is
the Debian package (`make test` installs it); without it these tests fail, they do not skip.
"""

from __future__ import annotations

import datetime
import json
import time

import pytest

from tests.conftest import AMD, GAUDI, NVSMI
from tests.integration.monitor_helpers import Exporter, Prometheus

H200 = str(NVSMI / "h200-capture-idle-load.txt")
T4 = str(NVSMI / "tesla-t4-2procs-q-x.xml")
XID = str(NVSMI / "dmesg-xid119-gsp-rpc-timeout.log")
MI100 = str(AMD / "mi100_rocm602.json")
GAUDI2 = str(GAUDI / "hl-smi-gaudi2x8-1.19.1.txt")
MIB = 2**20


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    import dlrig.monitor.assets as assets

    workdir = tmp_path_factory.mktemp("prometheus")
    rules = [workdir / "alerts.yml", workdir / "alerts-dcgm.yml"]
    rules[0].write_bytes(assets.asset_bytes("alerts.yml"))
    rules[1].write_bytes(assets.asset_bytes("alerts.yml", dcgm_names=True))
    exporters = {
        "h200": Exporter("--replay", H200, "--replay", XID, "--replay-state", "load"),
        "t4": Exporter("--replay", T4, "--interval", "0.5"),
        "dcgm": Exporter("--replay", H200, "--replay-state", "load", "--dcgm-names"),
        "dcgm-t4": Exporter("--replay", T4, "--interval", "0.5", "--dcgm-names"),
        "mi100": Exporter("--replay", MI100, "--interval", "0.5"),
        "amd": Exporter("--replay", MI100, "--interval", "0.5", "--amd-names"),
        "gaudi": Exporter("--replay", GAUDI2, "--interval", "0.5"),
    }
    prometheus = None
    try:
        prometheus = Prometheus(workdir, {name: e.target for name, e in exporters.items()}, rules)
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
    # A replay keeps the kernel log's own time: its last Xid line is "[Sun Feb 23 16:30:13 2025]"
    # or near it, not the moment of the scrape (a year-old Xid must not page anyone today).
    seen = stack.query('dlrig_gpu_xid_last_seen_timestamp_seconds{job="h200"}')
    when = datetime.datetime.fromtimestamp(_value(seen), datetime.UTC)
    assert abs(when - datetime.datetime(2025, 2, 23, 16, 30, tzinfo=datetime.UTC)).days < 1


def test_t4_link_width_downgrade_expression_selects_the_t4(stack: Prometheus) -> None:
    stack.wait_for('dlrig_gpu_pcie_link_width{job="t4"}')
    # <current_link_width>8x</current_link_width> of <max_link_width>16x</max_link_width>
    result = stack.query("dlrig_gpu_pcie_link_width < dlrig_gpu_pcie_link_width_max")
    assert [r["metric"]["job"] for r in result] == ["t4"]
    assert float(result[0]["value"][1]) == 8


def test_dcgm_names_answer_the_dcgm_dashboard_queries(stack: Prometheus) -> None:
    # The queries of dcgm-exporter's Grafana dashboard (grafana/dcgm-exporter-dashboard.json),
    # with its $Hostname and $gpu variables set to "all".
    sel = '{Hostname=~".+", gpu=~".+", job="dcgm"}'
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
    [series] = stack.query('DCGM_FI_DEV_GPU_UTIL{job="dcgm"}')
    assert {"pci_bus_id", "device", "modelName"} <= set(series["metric"])
    assert series["metric"]["modelName"] == "NVIDIA H200"
    assert series["metric"]["device"] == "nvidia0"


def test_shipped_alert_rules_evaluate_cleanly_on_scraped_data(stack: Prometheus) -> None:
    stack.wait_for("dlrig_gpu_up")
    stack.wait_for('DCGM_FI_DEV_PCIE_LINK_WIDTH{job="dcgm-t4"}')
    deadline = time.monotonic() + 30
    while True:
        groups = stack.api("rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        if rules and all(rule.get("lastEvaluation", "").startswith("20") for rule in rules):
            break
        assert time.monotonic() < deadline, "rules were not evaluated"
        time.sleep(0.5)
    assert {group["name"]: len(group["rules"]) for group in groups} == {
        "dlrig-gpu": 14,
        "dlrig-gpu-dcgm": 14,
    }
    assert {rule["health"] for rule in rules} == {"ok"}, [
        (rule["name"], rule.get("lastError")) for rule in rules if rule["health"] != "ok"
    ]
    # The Xid rules fire on an Xid of the last 15 minutes (alerts_test.yml proves they do); the
    # replayed Xid 119 is dated February 2025 by its log, so it fires nothing today.
    deadline = time.monotonic() + 30
    while True:
        alerts = stack.api("alerts")["alerts"]
        states = {(a["labels"]["alertname"], a["labels"]["job"]): a["state"] for a in alerts}
        expected = {
            ("DlrigGpuPcieWidthDowngrade", "t4"),
            ("DlrigGpuLowSmActivity", "t4"),
            ("DlrigGpuPcieWidthDowngrade", "dcgm-t4"),
            ("DlrigGpuLowSmActivity", "dcgm-t4"),
        }
        if expected <= set(states):
            break
        assert time.monotonic() < deadline, states
        time.sleep(0.5)
    # The T4 (x8 of x16, no kernel running while "python" holds 1005 MiB of its 1032 MiB used)
    # has its two alerts pending in both namings: they wait out their `for:` time.
    for job in ("t4", "dcgm-t4"):
        assert states[("DlrigGpuPcieWidthDowngrade", job)] == "pending"
        assert states[("DlrigGpuLowSmActivity", job)] == "pending"
    assert not any(job == "h200" for _, job in states), states
    # The healthy H200 under load raises nothing in DCGM's names (its Xid 119 is on another
    # GPU's bus, 0000:9b:00, so no GPU of the replay has a last Xid).
    assert not any(job == "dcgm" for _, job in states), states


_NO_DATA_IN_RECORDINGS = {
    # nvidia-smi does not print GPM activity or the energy counter; none of the replayed GPUs
    # has a slowdown reason active or is in MIG mode; a replay does not sample this host.
    "Host CPU",
    "Host CPU (dlrig exporter only)",
    "SM activity (GPM, Hopper+)",
    "SM activity (DCGM profiling)",
    "Energy use (from the energy counter)",
    "Clock slowdown reasons active",
    "Memory per MIG instance",
}


@pytest.mark.parametrize(
    ("dcgm_names", "jobs"), [(False, ("h200", "t4")), (True, ("dcgm", "dcgm-t4"))]
)
def test_every_dashboard_query_runs_and_shows_the_replayed_gpus(
    stack: Prometheus, dcgm_names: bool, jobs: tuple[str, ...]
) -> None:
    import dlrig.monitor.assets as assets

    dashboard = json.loads(assets.asset_bytes("grafana-dashboard.json", dcgm_names))
    for job in jobs:
        stack.wait_for(f'dlrig_exporter_samples_total{{job="{job}"}}')
    time.sleep(3)  # a few scrapes, so rate() over the counters has two points
    # Grafana's $instance is a regex of the chosen targets' instance labels.
    instances = "|".join(
        series["metric"]["instance"] for job in jobs for series in stack.query(f'up{{job="{job}"}}')
    )
    empty = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"].replace("$instance", instances).replace("$gpu", ".+")
            result = stack.query(expr)  # raises on a query Prometheus rejects
            if not result:
                empty.append(panel["title"])
    assert set(empty) <= _NO_DATA_IN_RECORDINGS, empty
    for variable in dashboard["templating"]["list"]:
        if variable.get("definition", "").startswith("label_values("):
            metric = variable["definition"].removeprefix("label_values(").split(",")[0]
            assert stack.query(metric.replace("$instance", instances))


def test_promql_returns_the_recorded_amd_and_gaudi_values(stack: Prometheus) -> None:
    # mi100_rocm602.json card0: "Average Graphics Package Power (W)": "36.0",
    # "Temperature (Sensor edge) (C)": "53.0", "VRAM Total Used Memory (B)": "6750208"
    mi100 = '{job="mi100",gpu="0"}'
    stack.wait_for(f"dlrig_gpu_power_watts{mi100}")
    assert _value(stack.query(f"dlrig_gpu_power_watts{mi100}")) == pytest.approx(36.0)
    assert _value(stack.query(f"dlrig_gpu_temperature_celsius{mi100}")) == pytest.approx(53.0)
    assert _value(stack.query(f"dlrig_gpu_memory_used_bytes{mi100}")) == pytest.approx(6750208)
    # The same card in AMD device-metrics-exporter's names: VRAM in MB, its labels.
    amd = '{job="amd",gpu_id="0"}'
    stack.wait_for(f"gpu_power_usage{amd}")
    assert _value(stack.query(f"gpu_power_usage{amd}")) == pytest.approx(36.0)
    assert _value(stack.query(f"gpu_edge_temperature{amd}")) == pytest.approx(53.0)
    assert _value(stack.query(f"gpu_used_vram{amd}")) == pytest.approx(6750208 / MIB)
    assert _value(stack.query('gpu_clock{job="amd",gpu_id="0",clock_type="system"}')) == 300
    # hl-smi, Gaudi 2 device 3: "| N/A   22C   N/A  92W /  600W  | 96565MiB /  98304MiB |"
    gaudi = '{job="gaudi",gpu="3"}'
    stack.wait_for(f"dlrig_gpu_power_watts{gaudi}")
    assert _value(stack.query(f"dlrig_gpu_power_watts{gaudi}")) == pytest.approx(92)
    assert _value(stack.query(f"dlrig_gpu_memory_used_bytes{gaudi}")) == 96565 * MIB

"""The shipped alert rules and Grafana dashboard only use metrics the exporter writes."""

from __future__ import annotations

import dataclasses
import json
import re

from prometheus_client.parser import text_string_to_metric_families

from dlrig.machine.gpu_sources import ReplaySource
from dlrig.monitor.assets import asset_bytes
from dlrig.monitor.exporter import ExporterOptions, render
from dlrig.monitor.sample import GpuReading, Sample, XidCount
from tests.conftest import NVSMI

_NAME = re.compile(r"\b(dlrig_[a-z0-9_]+)\b")


def _exported_names() -> set[str]:
    """Every series name the exporter writes, with the live-only fields (energy counter, GPM
    activity, NVLink) filled in on top of a recorded GPU."""
    source = ReplaySource([NVSMI / "h200-capture-idle-load.txt"], state="load")
    source.advance(0.0)
    gpu = dataclasses.replace(
        source.read_gpu(0),
        energy_consumed_joules=1.0,
        sm_activity_percent=50.0,
        graphics_activity_percent=50.0,
        sm_occupancy_percent=50.0,
        tensor_activity_percent=50.0,
        dram_activity_percent=50.0,
        nvlink_tx_bytes=1,
        nvlink_rx_bytes=1,
    )
    from dlrig.machine.host_metrics import HostMeter

    sample = Sample(
        timestamp_unix=1.0,
        duration_seconds=0.001,
        gpus=(GpuReading(0, "ok", gpu), GpuReading(1, "lost", gpu, "gone")),
        host=HostMeter().read(),
        xids=(XidCount(79, gpu.pci_bus_id, 0, 1, 1.0, "critical", "fallen off the bus"),),
        sequence=1,
    )
    text = render(sample, source.info, ExporterOptions(), object()).decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names.update(s.name for s in family.samples)
    return names


def test_dashboard_and_rules_use_only_exported_metrics() -> None:
    exported = _exported_names()
    dashboard = json.loads(asset_bytes("grafana-dashboard.json"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = {name for expr in exprs for name in _NAME.findall(expr)}
    assert used and used <= exported, used - exported
    rules = asset_bytes("alerts.yml").decode()
    used_by_rules = set(_NAME.findall(rules))
    assert used_by_rules <= exported, used_by_rules - exported


def test_dashboard_panels_have_unique_ids_and_datasource_variable() -> None:
    dashboard = json.loads(asset_bytes("grafana-dashboard.json"))
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "instance", "gpu"}


def test_counter_metadata_names_the_series_it_describes() -> None:
    source = ReplaySource([NVSMI / "h200-capture-idle-load.txt"], state="load")
    source.advance(0.0)
    gpu = dataclasses.replace(source.read_gpu(0), energy_consumed_joules=5.0)
    sample = Sample(1.0, 0.001, (GpuReading(0, "ok", gpu),), None, (), 1)
    text = render(sample, source.info, ExporterOptions(), object()).decode()
    types = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert types["dlrig_gpu_energy_joules"] == "counter"
    assert types["dlrig_gpu_ecc_errors"] == "counter"
    assert "_total_total" not in text
    dcgm = render(sample, source.info, ExporterOptions(dcgm_names=True), object()).decode()
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in dcgm
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in dcgm  # dcgm-exporter's bare name
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in dcgm
    assert "dlrig_gpu_info{" in dcgm  # identity and host metrics stay in DCGM mode

"""The shipped alert rules and Grafana dashboards, in both namings, only use metrics the exporter
writes in that naming; the metric table they come from is well formed."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dlrig.knowledge import xid as xid_table
from dlrig.machine.gpu_sources import ReplaySource
from dlrig.machine.model import Gpu, MigDevice
from dlrig.monitor import metric_table
from dlrig.monitor.assets import asset_bytes
from dlrig.monitor.exporter import ExporterOptions, render
from dlrig.monitor.sample import GpuReading, Sample, XidCount
from tests.conftest import NVSMI

_NAME = re.compile(r"\b(dlrig_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)\b")


def _exported_names(dcgm_names: bool = False) -> set[str]:
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
        mig_devices=(MigDevice(0, "3g.40gb", 2, 40448 * 2**20, 11091 * 2**20, 60),),
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
    text = render(sample, source.info, ExporterOptions(dcgm_names=dcgm_names), object()).decode()
    # The series names as written (the client's parser renames bare DCGM counters NAME_total).
    return {re.split(r"[{ ]", line, maxsplit=1)[0] for line in text.splitlines() if line[:1] != "#"}


@pytest.mark.parametrize("dcgm_names", [False, True])
def test_dashboard_and_rules_use_only_exported_metrics(dcgm_names: bool) -> None:
    exported = _exported_names(dcgm_names)
    dashboard = json.loads(asset_bytes("grafana-dashboard.json", dcgm_names))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = {name for expr in exprs for name in _NAME.findall(expr)}
    assert used and used <= exported, used - exported
    rules = asset_bytes("alerts.yml", dcgm_names).decode()
    code = "\n".join(line for line in rules.splitlines() if not line.lstrip().startswith("#"))
    used_by_rules = set(_NAME.findall(code))
    assert used_by_rules <= exported, used_by_rules - exported
    if dcgm_names:
        # Only GPU readings dcgm-exporter has no name for stay in dlrig's names.
        dlrig_only = {n for n in used | used_by_rules if n.startswith("dlrig_")}
        assert dlrig_only <= {
            "dlrig_gpu_up",
            "dlrig_exporter_last_sample_timestamp_seconds",
            "dlrig_host_cpu_utilization_ratio",
        }, dlrig_only


@pytest.mark.parametrize("dcgm_names", [False, True])
def test_dashboard_panels_have_unique_ids_and_datasource_variable(dcgm_names: bool) -> None:
    dashboard = json.loads(asset_bytes("grafana-dashboard.json", dcgm_names))
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "instance", "gpu"}


def test_dcgm_xid_rules_follow_the_xid_table() -> None:
    rules = asset_bytes("alerts.yml", dcgm_names=True).decode()
    blocks = rules.split("- alert: ")
    for alert, severity in (("DlrigGpuXidCritical", "critical"), ("DlrigGpuXidWarning", "warn")):
        [block] = [b for b in blocks if b.startswith(alert + "\n")]
        codes = {int(c) for c in re.findall(r"DCGM_FI_DEV_XID_ERRORS == (\d+)", block)}
        table = {code for code, info in xid_table.table().items() if info.severity == severity}
        assert codes == table, (alert, codes ^ table)


def test_metric_table_rows_read_real_fields_and_are_well_formed() -> None:
    subjects = {
        "gpu": Gpu(0, "x"),
        "mig": MigDevice(0),
        "host": _exported_host(),
    }
    rows = metric_table.metrics()
    assert len(rows) > 40
    for metric in rows:
        if metric.reading not in metric_table.DERIVED:
            value: object = subjects[metric.subject]
            for part in metric.reading.split("."):
                assert hasattr(value, part), (metric.subject, metric.reading)
                value = getattr(value, part)
    dcgm = [m.dcgm.name for m in rows if m.dcgm is not None and m.subject == "gpu"]
    assert len(dcgm) == len(set(dcgm))  # one reading per DCGM name on a GPU
    assert all(m.source and m.as_of for m in rows)


def _exported_host():
    from dlrig.machine.host_metrics import HostMeter

    return HostMeter().read()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu,x,dlrig_a,counter,1,,h,,,,,s,2026", "only they, end in _total"),
        ("gpu,x,dlrig_a,gauge,one,,h,,,,,s,2026", "is not a number"),
        ("gpu,x,dlrig_a,gauge,1,,,,,,,s,2026", "has no help text"),
        ("disk,x,dlrig_a,gauge,1,,h,,,,,s,2026", "'of' must be one of"),
        ("gpu,x,dlrig_a,gauge,1,,h,,,,,,", "needs source and as_of"),
        ("gpu,x,dlrig_a,gauge,1,,h,,,,,s,2026\ngpu,y,dlrig_a,gauge,1,,other,,,,,s,2026", "differs"),
    ],
)
def test_metric_table_refuses_malformed_rows(text: str, message: str) -> None:
    header = "of,reading,dlrig_name,dlrig_type,dlrig_scale,dlrig_labels,help,dcgm_name,dcgm_type,"
    header += "dcgm_scale,dcgm_help,source,as_of\n"
    with pytest.raises(ValueError, match=message):
        metric_table.parse(header + text + "\n")


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


@pytest.mark.parametrize(
    ("dcgm_names", "encoder", "decoder", "value"),
    [
        (False, "dlrig_gpu_encoder_utilization_ratio", "dlrig_gpu_decoder_utilization_ratio", 0.12),
        (True, "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", 12.0),
    ],
)
def test_the_video_engines_are_exported_in_both_namings(dcgm_names, encoder, decoder, value):
    # nvidia-smi -q -d UTILIZATION of a GPU encoding video: "Encoder : 12 %", "Decoder : 0 %".
    source = ReplaySource([NVSMI / "q-d-utilization-396.24-nvenc-busy.txt"])
    source.advance(0.0)
    gpu = source.read_gpu(0)
    sample = Sample(1.0, 0.001, (GpuReading(0, "ok", gpu),), None, (), 1)
    text = render(sample, source.info, ExporterOptions(dcgm_names=dcgm_names), object()).decode()
    found = {
        s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples
    }
    assert found[encoder] == pytest.approx(value) and found[decoder] == 0.0

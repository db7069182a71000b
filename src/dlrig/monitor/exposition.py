"""One sample in the Prometheus text exposition format, in dlrig's names or dcgm-exporter's.

dlrig's names follow Prometheus conventions (base units, `_total` counters, identity in
`dlrig_gpu_info`); with `dcgm_names` the GPU series carry dcgm-exporter's names, units and
labels, so its Grafana dashboards and alert rules work unchanged. What each reading is called in
each naming is the metric table (`dlrig.monitor.metric_table`); this module adds the families
whose labels come from the data (clock reasons, processes, Xid codes, CPU cores).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dlrig import __version__
from dlrig.extras import require
from dlrig.machine.gpu_source_base import SourceInfo
from dlrig.machine.model import Gpu
from dlrig.machine.nvml import CLOCK_EVENT_BITS, clock_event_mask
from dlrig.monitor import metric_table
from dlrig.monitor.metric_table import Series
from dlrig.monitor.sample import GpuReading, Sample

_UP_HELP = "1 when the GPU answered in the last sample, 0 when it is lost or its reads hang."


def _prometheus() -> Any:
    return require("prometheus_client", "monitor", "the Prometheus exporter")


@dataclass(frozen=True)
class ExporterOptions:
    dcgm_names: bool = False
    amd_names: bool = False  # AMD device-metrics-exporter's names (gpu_gfx_activity, ...)
    hostname: str | None = None


class _Families:
    """Metric families in first-use order; samples are added by name."""

    def __init__(self) -> None:
        from prometheus_client.metrics_core import Metric

        self._metric = Metric
        self.families: dict[str, Any] = {}
        # dcgm-exporter's counters carry no `_total`; their HELP/TYPE lines are fixed up.
        self.bare_counters: list[str] = []

    def add(
        self, name: str, kind: str, doc: str, labels: dict[str, str], value: float | None
    ) -> None:
        if value is None:
            return
        family = self.families.get(name)
        if family is None:
            # prometheus_client names a counter family without `_total` and writes its HELP
            # and TYPE lines with it; the sample keeps the full name.
            family = self._metric(name.removesuffix("_total"), doc, kind)
            self.families[name] = family
            if kind == "counter" and not name.endswith("_total"):
                self.bare_counters.append(name)
        family.add_sample(name, labels, float(value))

    def series(self, series: Series | None, labels: dict[str, str], value: float | None) -> None:
        if series is None or value is None:
            return
        self.add(series.name, series.kind, series.help, {**labels, **dict(series.labels)}, value)


class _Static:
    def __init__(self, families: list[Any]) -> None:
        self._families = families

    def collect(self) -> Iterator[Any]:
        yield from self._families


def _pstate(text: str | None) -> float | None:
    if not text or not text.upper().startswith("P") or not text[1:].isdigit():
        return None
    return float(text[1:])


def reading_value(subject: Any, reading: str) -> float | None:
    """A table row's reading of `subject` (a dotted field path, or a derived reading)."""
    if reading == "memory_free_bytes":
        used, total = subject.memory_used_bytes, subject.memory_total_bytes
        return None if used is None or total is None else float(total - used)
    if reading == "performance_state_number":
        return _pstate(subject.performance_state)
    if reading == "clocks_event_mask":
        reasons = subject.clocks_event_reasons
        return None if reasons is None else float(clock_event_mask(reasons))
    value: Any = subject
    for part in reading.split("."):
        value = getattr(value, part)
    return None if value is None else float(value)


def render(sample: Sample | None, info: SourceInfo, options: ExporterOptions, stats: Any) -> bytes:
    """The exposition text for one sample (None: before the first sample)."""
    prom = _prometheus()
    families = _Families()
    hostname = options.hostname or info.hostname or socket.gethostname()
    if sample is not None:
        if options.amd_names:
            write_gpus = _amd_gpu_metrics
        elif options.dcgm_names:
            write_gpus = _dcgm_gpu_metrics
        else:
            write_gpus = _gpu_metrics
        write_gpus(families, sample, info, hostname)
        _host_metrics(families, sample)
        _xid_metrics(families, sample)
    _exporter_metrics(families, sample, info, stats)
    registry = prom.CollectorRegistry(auto_describe=False)
    registry.register(_Static(list(families.families.values())))
    data: bytes = prom.generate_latest(registry)
    for name in families.bare_counters:
        # generate_latest writes every counter's HELP/TYPE as NAME_total; dcgm-exporter's
        # counters are plain NAME, and the metadata must name the series it describes.
        data = data.replace(f"# HELP {name}_total ".encode(), f"# HELP {name} ".encode())
        data = data.replace(
            f"# TYPE {name}_total counter".encode(), f"# TYPE {name} counter".encode()
        )
    return data


def _up(f: _Families, reading: GpuReading, uuid_label: str) -> None:
    uuid = reading.gpu.uuid if reading.gpu is not None else None
    labels = {"gpu": str(reading.index), uuid_label: uuid or ""}
    f.add("dlrig_gpu_up", "gauge", _UP_HELP, labels, 1.0 if reading.up else 0.0)


def _info_metric(f: _Families, index: int, g: Gpu, info: SourceInfo, hostname: str) -> None:
    labels = {
        "gpu": str(index),
        "uuid": g.uuid or "",
        "name": g.name,
        "pci_bus_id": g.pci_bus_id or "",
        "serial": g.serial or "",
        "compute_capability": g.compute_capability or "",
        "catalogue_id": g.catalogue_id or "",
        "driver_version": info.driver_version or "",
        "hostname": hostname,
    }
    f.add("dlrig_gpu_info", "gauge", "GPU identity; always 1.", labels, 1.0)


def _table(f: _Families, subject: str, naming: str, of: Any, labels: dict[str, str]) -> None:
    for metric in metric_table.of(subject):
        series = metric.series(naming)
        if series is not None:
            value = reading_value(of, metric.reading)
            f.series(series, labels, None if value is None else value * series.scale)


def _gpu_metrics(f: _Families, sample: Sample, info: SourceInfo, hostname: str) -> None:
    for reading in sample.gpus:
        _up(f, reading, "uuid")
        if reading.gpu is not None:
            _info_metric(f, reading.index, reading.gpu, info, hostname)
        if not reading.up or reading.gpu is None:
            continue  # no stale values: absent series say "unknown" to Prometheus
        g = reading.gpu
        labels = {"gpu": str(reading.index), "uuid": g.uuid or ""}
        _table(f, "gpu", "dlrig", g, labels)
        _clock_reasons(f, g, labels)
        for mig in g.mig_devices:
            mig_labels = {
                **labels,
                "mig_device": str(mig.index),
                "gpu_instance_id": "" if mig.gpu_instance_id is None else str(mig.gpu_instance_id),
                "profile": mig.profile or "",
            }
            _table(f, "mig", "dlrig", mig, mig_labels)
        _processes(f, g, labels)


def _clock_reasons(f: _Families, g: Gpu, labels: dict[str, str]) -> None:
    if g.clocks_event_reasons is None:
        return
    active = set(g.clocks_event_reasons)
    for _, reason in CLOCK_EVENT_BITS:
        f.add(
            "dlrig_gpu_clocks_event_active",
            "gauge",
            "1 while this reason holds the clocks down (NVML clocks event / throttle reasons).",
            {**labels, "reason": reason},
            1.0 if reason in active else 0.0,
        )


def _processes(f: _Families, g: Gpu, labels: dict[str, str]) -> None:
    if g.processes is None:
        return
    f.add("dlrig_gpu_processes", "gauge", "Processes using the GPU.", labels, len(g.processes))
    for proc in g.processes:
        f.add(
            "dlrig_gpu_process_memory_used_bytes",
            "gauge",
            "GPU memory held by a process, with its container when it runs in one.",
            {
                **labels,
                "pid": str(proc.pid),
                "process": proc.name or "",
                "container_id": (proc.container_id or "")[:12],
                "pod_uid": proc.kubernetes_pod_uid or "",
            },
            proc.used_memory_bytes,
        )


def _amd_gpu_metrics(f: _Families, sample: Sample, info: SourceInfo, hostname: str) -> None:
    """AMD device-metrics-exporter's names and labels (gpu_id, serial_number, card_model,
    hostname), so its Grafana dashboards and alerts read dlrig's series."""
    for reading in sample.gpus:
        _up(f, reading, "uuid")
        g = reading.gpu
        if g is None or not reading.up:
            continue
        labels = {
            "gpu_id": str(reading.index),
            "serial_number": g.serial or "",
            "card_model": g.name,
            "hostname": hostname,
        }
        _table(f, "gpu", "amd", g, labels)


def _dcgm_labels(g: Gpu, hostname: str, driver: str | None) -> dict[str, str]:
    # dcgm-exporter's label names, case included; `device` is the /dev node name.
    return {
        "gpu": str(g.index),
        "UUID": g.uuid or "",
        "pci_bus_id": g.pci_bus_id or "",
        "device": f"nvidia{g.index}",
        "modelName": g.name,
        "Hostname": hostname,
        "DCGM_FI_DRIVER_VERSION": driver or "",
    }


def _dcgm_gpu_metrics(f: _Families, sample: Sample, info: SourceInfo, hostname: str) -> None:
    last_xid: dict[int, tuple[float, int]] = {}
    for xid in sample.xids:
        if xid.gpu_index is not None:
            seen = last_xid.get(xid.gpu_index)
            if seen is None or xid.last_seen_unix >= seen[0]:
                last_xid[xid.gpu_index] = (xid.last_seen_unix, xid.code)
    for reading in sample.gpus:
        _up(f, reading, "UUID")
        if not reading.up or reading.gpu is None:
            continue
        g = reading.gpu
        _info_metric(f, reading.index, g, info, hostname)
        labels = _dcgm_labels(g, hostname, info.driver_version)
        _table(f, "gpu", "dcgm", g, labels)
        # dcgm-exporter's XID_ERRORS is the last Xid value, 0 when none: kept for its
        # dashboards; dlrig_gpu_xid_errors_total is the counter to alert on.
        f.add(
            "DCGM_FI_DEV_XID_ERRORS",
            "gauge",
            "Value of the last XID error encountered.",
            labels,
            last_xid.get(g.index, (0.0, 0))[1],
        )
        for mig in g.mig_devices:
            mig_labels = {
                **labels,
                "GPU_I_ID": "" if mig.gpu_instance_id is None else str(mig.gpu_instance_id),
                "GPU_I_PROFILE": mig.profile or "",
            }
            _table(f, "mig", "dcgm", mig, mig_labels)


def _host_metrics(f: _Families, sample: Sample) -> None:
    h = sample.host
    if h is None:
        return
    for index, percent in enumerate(h.cpu_percent_per_core):
        f.add(
            "dlrig_host_cpu_utilization_ratio",
            "gauge",
            "Busy fraction of each logical CPU over the last sample period.",
            {"cpu": str(index)},
            percent / 100.0,
        )
    _table(f, "host", "dlrig", h, {})


def _xid_metrics(f: _Families, sample: Sample) -> None:
    for xid in sample.xids:
        labels = {
            "gpu": "" if xid.gpu_index is None else str(xid.gpu_index),
            "pci_bus_id": xid.pci_bus_id or "",
            "xid": str(xid.code),
            "severity": xid.severity,
        }
        f.add(
            "dlrig_gpu_xid_errors_total",
            "counter",
            "Xid errors reported by the driver since the exporter started, per code.",
            labels,
            xid.count,
        )
        f.add(
            "dlrig_gpu_xid_last_seen_timestamp_seconds",
            "gauge",
            "When this Xid code was last seen on this GPU (Unix time).",
            labels,
            xid.last_seen_unix,
        )


def _exporter_metrics(f: _Families, sample: Sample | None, info: SourceInfo, stats: Any) -> None:
    f.add(
        "dlrig_exporter_build_info",
        "gauge",
        "dlrig version and where the readings come from; always 1.",
        {"version": __version__, "source": info.kind, "description": info.description},
        1.0,
    )
    if sample is None:
        return
    for name, kind, doc, value in (
        (
            "dlrig_exporter_last_sample_timestamp_seconds",
            "gauge",
            "When the sample on this page was taken (Unix time).",
            sample.timestamp_unix,
        ),
        (
            "dlrig_exporter_sample_duration_seconds",
            "gauge",
            "How long the last sampling round took.",
            sample.duration_seconds,
        ),
        ("dlrig_exporter_samples_total", "counter", "Sampling rounds done.", sample.sequence),
        (
            "dlrig_exporter_errors_total",
            "counter",
            "Sampling rounds or listeners that failed (the exporter kept serving).",
            getattr(stats, "errors_total", 0) + getattr(stats, "listener_errors_total", 0),
        ),
    ):
        f.add(name, kind, doc, {}, value)

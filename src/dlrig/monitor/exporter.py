"""Prometheus exporter: the sampler's last sample in the text exposition format.

The page is rendered once per sample (in the sampler's thread) and every scrape is served from
those bytes, so a scrape costs the same with 1 GPU or 8 and never touches NVML. Names follow
Prometheus conventions (base units, `_total` counters, identity in `dlrig_gpu_info`); with
`dcgm_names` the GPU metrics carry dcgm-exporter's names, units and labels instead, so its
Grafana dashboards work unchanged.
"""

from __future__ import annotations

import gzip
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dlrig import __version__
from dlrig.errors import InputError, MissingExtraError
from dlrig.machine.gpu_sources import SourceInfo
from dlrig.machine.model import Gpu
from dlrig.machine.nvml import CLOCK_EVENT_BITS, clock_event_mask
from dlrig.monitor.sample import Sample


def _prometheus() -> Any:
    try:
        import prometheus_client
    except ImportError:
        raise MissingExtraError("prometheus_client", "monitor", "the Prometheus exporter") from None
    return prometheus_client


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


class _Static:
    def __init__(self, families: list[Any]) -> None:
        self._families = families

    def collect(self) -> Iterator[Any]:
        yield from self._families


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100.0


def _mhz_to_hz(mhz: int | None) -> float | None:
    return None if mhz is None else mhz * 1e6


def _pstate(text: str | None) -> float | None:
    if not text or not text.upper().startswith("P") or not text[1:].isdigit():
        return None
    return float(text[1:])


@dataclass(frozen=True)
class ExporterOptions:
    dcgm_names: bool = False
    hostname: str | None = None


def render(sample: Sample | None, info: SourceInfo, options: ExporterOptions, stats: Any) -> bytes:
    """The exposition text for one sample (None: before the first sample)."""
    prom = _prometheus()
    families = _Families()
    hostname = options.hostname or info.hostname or socket.gethostname()
    if sample is not None:
        if options.dcgm_names:
            _dcgm_gpu_metrics(families, sample, info, hostname)
        else:
            _gpu_metrics(families, sample, info, hostname)
        _host_metrics(families, sample)
        _xid_metrics(families, sample, options.dcgm_names)
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


def _gpu_labels(gpu: Gpu) -> dict[str, str]:
    return {"gpu": str(gpu.index), "uuid": gpu.uuid or ""}


def _gpu_metrics(f: _Families, sample: Sample, info: SourceInfo, hostname: str) -> None:
    for reading in sample.gpus:
        uuid = reading.gpu.uuid if reading.gpu is not None else None
        base = {"gpu": str(reading.index), "uuid": uuid or ""}
        f.add(
            "dlrig_gpu_up",
            "gauge",
            "1 when the GPU answered in the last sample, 0 when it is lost or its reads hang.",
            base,
            1.0 if reading.up else 0.0,
        )
        if reading.gpu is not None:
            _info_metric(f, reading.gpu, base, info, hostname)
        if not reading.up or reading.gpu is None:
            continue  # no stale values: absent series say "unknown" to Prometheus
        _one_gpu(f, reading.gpu, base)


def _info_metric(
    f: _Families, g: Gpu, base: dict[str, str], info: SourceInfo, hostname: str
) -> None:
    f.add(
        "dlrig_gpu_info",
        "gauge",
        "GPU identity; always 1.",
        {
            **base,
            "name": g.name,
            "pci_bus_id": g.pci_bus_id or "",
            "serial": g.serial or "",
            "compute_capability": g.compute_capability or "",
            "catalogue_id": g.catalogue_id or "",
            "driver_version": info.driver_version or "",
            "hostname": hostname,
        },
        1.0,
    )


# Per-GPU series with the GPU's labels only: (name, type, help, value of a reading).
_GPU_SERIES: tuple[tuple[str, str, str, Callable[[Gpu], float | None]], ...] = (
    (
        "dlrig_gpu_utilization_ratio",
        "gauge",
        "Fraction of the last sample period in which a kernel ran (NVML utilization.gpu).",
        lambda g: _ratio(g.utilization_gpu_percent),
    ),
    (
        "dlrig_gpu_memory_utilization_ratio",
        "gauge",
        "Fraction of the last sample period in which device memory was read or written.",
        lambda g: _ratio(g.utilization_memory_percent),
    ),
    (
        "dlrig_gpu_graphics_activity_ratio",
        "gauge",
        "Fraction: graphics/compute engine was active.",
        lambda g: _ratio(g.graphics_activity_percent),
    ),
    (
        "dlrig_gpu_sm_activity_ratio",
        "gauge",
        "Fraction: SMs were busy (GPM, Hopper and newer).",
        lambda g: _ratio(g.sm_activity_percent),
    ),
    (
        "dlrig_gpu_sm_occupancy_ratio",
        "gauge",
        "Fraction: resident warps vs the maximum (GPM).",
        lambda g: _ratio(g.sm_occupancy_percent),
    ),
    (
        "dlrig_gpu_tensor_activity_ratio",
        "gauge",
        "Fraction: tensor cores were busy (GPM).",
        lambda g: _ratio(g.tensor_activity_percent),
    ),
    (
        "dlrig_gpu_dram_activity_ratio",
        "gauge",
        "Fraction: DRAM bandwidth used vs peak (GPM).",
        lambda g: _ratio(g.dram_activity_percent),
    ),
    (
        "dlrig_gpu_memory_used_bytes",
        "gauge",
        "Device memory in use.",
        lambda g: g.memory_used_bytes,
    ),
    (
        "dlrig_gpu_memory_total_bytes",
        "gauge",
        "Device memory size.",
        lambda g: g.memory_total_bytes,
    ),
    ("dlrig_gpu_sm_clock_hertz", "gauge", "SM clock.", lambda g: _mhz_to_hz(g.sm_clock_mhz)),
    (
        "dlrig_gpu_sm_clock_max_hertz",
        "gauge",
        "Highest SM clock the GPU supports.",
        lambda g: _mhz_to_hz(g.sm_clock_max_mhz),
    ),
    (
        "dlrig_gpu_memory_clock_hertz",
        "gauge",
        "Memory clock.",
        lambda g: _mhz_to_hz(g.memory_clock_mhz),
    ),
    (
        "dlrig_gpu_memory_clock_max_hertz",
        "gauge",
        "Highest memory clock.",
        lambda g: _mhz_to_hz(g.memory_clock_max_mhz),
    ),
    ("dlrig_gpu_power_watts", "gauge", "Power draw.", lambda g: g.power_draw_watts),
    (
        "dlrig_gpu_power_limit_watts",
        "gauge",
        "Enforced power limit.",
        lambda g: g.power_limit_watts,
    ),
    (
        "dlrig_gpu_power_default_limit_watts",
        "gauge",
        "Default power limit of the board.",
        lambda g: g.power_default_limit_watts,
    ),
    (
        "dlrig_gpu_energy_joules_total",
        "counter",
        "Energy used since the driver was loaded.",
        lambda g: g.energy_consumed_joules,
    ),
    ("dlrig_gpu_temperature_celsius", "gauge", "GPU core temperature.", lambda g: g.temperature_c),
    (
        "dlrig_gpu_slowdown_temperature_celsius",
        "gauge",
        "Temperature at which the GPU starts to slow its clocks.",
        lambda g: g.temperature_slowdown_c,
    ),
    (
        "dlrig_gpu_memory_temperature_celsius",
        "gauge",
        "Memory (HBM) temperature.",
        lambda g: g.memory_temperature_c,
    ),
    ("dlrig_gpu_fan_speed_ratio", "gauge", "Fan speed.", lambda g: _ratio(g.fan_speed_percent)),
    (
        "dlrig_gpu_performance_state",
        "gauge",
        "P-state: 0 is the fastest, 15 the slowest.",
        lambda g: _pstate(g.performance_state),
    ),
    (
        "dlrig_gpu_pcie_link_generation",
        "gauge",
        "Current PCIe generation.",
        lambda g: g.pcie.gen_current,
    ),
    (
        "dlrig_gpu_pcie_link_generation_max",
        "gauge",
        "Highest PCIe generation of the link.",
        lambda g: g.pcie.gen_max,
    ),
    ("dlrig_gpu_pcie_link_width", "gauge", "Current PCIe lanes.", lambda g: g.pcie.width_current),
    (
        "dlrig_gpu_pcie_link_width_max",
        "gauge",
        "Lanes the link supports.",
        lambda g: g.pcie.width_max,
    ),
    (
        "dlrig_gpu_pcie_transmit_bytes_per_second",
        "gauge",
        "PCIe traffic from the GPU (NVML samples 20 ms).",
        lambda g: g.pcie_tx_bytes_per_second,
    ),
    (
        "dlrig_gpu_pcie_receive_bytes_per_second",
        "gauge",
        "PCIe traffic to the GPU (NVML samples 20 ms).",
        lambda g: g.pcie_rx_bytes_per_second,
    ),
    (
        "dlrig_gpu_pcie_replay_errors_total",
        "counter",
        "PCIe packet replays since the driver was loaded (link quality).",
        lambda g: g.pcie_replay_errors,
    ),
    (
        "dlrig_gpu_nvlink_transmit_bytes_total",
        "counter",
        "NVLink data sent, all links.",
        lambda g: g.nvlink_tx_bytes,
    ),
    (
        "dlrig_gpu_nvlink_receive_bytes_total",
        "counter",
        "NVLink data received, all links.",
        lambda g: g.nvlink_rx_bytes,
    ),
)


def _one_gpu(f: _Families, g: Gpu, labels: dict[str, str]) -> None:
    add = f.add
    for name, kind, doc, read in _GPU_SERIES:
        add(name, kind, doc, labels, read(g))
    if g.clocks_event_reasons is not None:
        active = set(g.clocks_event_reasons)
        for _, reason in CLOCK_EVENT_BITS:
            add(
                "dlrig_gpu_clocks_event_active",
                "gauge",
                "1 while this reason holds the clocks down (NVML clocks event / throttle reasons).",
                {**labels, "reason": reason},
                1.0 if reason in active else 0.0,
            )
    for kind, value in (
        ("corrected", g.ecc_errors.volatile_corrected),
        ("uncorrected", g.ecc_errors.volatile_uncorrected),
    ):
        add(
            "dlrig_gpu_ecc_errors_total",
            "counter",
            "ECC errors since the driver was loaded (volatile counters).",
            {**labels, "type": kind},
            value,
        )
    for kind, value in (
        ("corrected", g.ecc_errors.aggregate_corrected),
        ("uncorrected", g.ecc_errors.aggregate_uncorrected),
    ):
        add(
            "dlrig_gpu_ecc_errors_lifetime",
            "gauge",
            "ECC errors over the GPU's life (aggregate counters).",
            {**labels, "type": kind},
            value,
        )
    for cause, value in (
        ("single_bit", g.retired_pages.single_bit),
        ("double_bit", g.retired_pages.double_bit),
    ):
        add(
            "dlrig_gpu_retired_pages",
            "gauge",
            "Memory pages retired (pre-Ampere GPUs).",
            {**labels, "cause": cause},
            value,
        )
    _flag(
        f,
        "dlrig_gpu_retired_pages_pending",
        "Page retirement waits for a reset.",
        labels,
        g.retired_pages.pending,
    )
    for kind, value in (
        ("correctable", g.remapped_rows.correctable),
        ("uncorrectable", g.remapped_rows.uncorrectable),
    ):
        add(
            "dlrig_gpu_remapped_rows",
            "gauge",
            "Memory rows remapped (Ampere and newer).",
            {**labels, "type": kind},
            value,
        )
    _flag(
        f,
        "dlrig_gpu_remapped_rows_pending",
        "A row remap waits for a GPU reset.",
        labels,
        g.remapped_rows.pending,
    )
    _flag(
        f,
        "dlrig_gpu_remapped_rows_failure",
        "A row remap failed: the GPU needs service.",
        labels,
        g.remapped_rows.failure,
    )
    _flag(f, "dlrig_gpu_mig_enabled", "MIG mode is on.", labels, g.mig_mode_enabled)
    for mig in g.mig_devices:
        mig_labels = {
            **labels,
            "mig_device": str(mig.index),
            "gpu_instance_id": "" if mig.gpu_instance_id is None else str(mig.gpu_instance_id),
            "profile": mig.profile or "",
        }
        add(
            "dlrig_gpu_mig_memory_used_bytes",
            "gauge",
            "Memory in use in a MIG instance.",
            mig_labels,
            mig.memory_used_bytes,
        )
        add(
            "dlrig_gpu_mig_memory_total_bytes",
            "gauge",
            "Memory of a MIG instance.",
            mig_labels,
            mig.memory_total_bytes,
        )
    if g.processes is not None:
        add("dlrig_gpu_processes", "gauge", "Processes using the GPU.", labels, len(g.processes))
        for proc in g.processes:
            add(
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


def _flag(f: _Families, name: str, doc: str, labels: dict[str, str], value: bool | None) -> None:
    f.add(name, "gauge", doc, labels, None if value is None else float(value))


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
    f.add(
        "dlrig_host_cpu_iowait_ratio",
        "gauge",
        "CPU time waiting for I/O.",
        {},
        _ratio(h.cpu_iowait_percent),
    )
    f.add("dlrig_host_load1", "gauge", "1-minute load average.", {}, h.load_average_1m)
    f.add("dlrig_host_memory_total_bytes", "gauge", "Host memory.", {}, h.memory_total_bytes)
    f.add(
        "dlrig_host_memory_available_bytes",
        "gauge",
        "Host memory available without swapping.",
        {},
        h.memory_available_bytes,
    )
    f.add("dlrig_host_swap_used_bytes", "gauge", "Swap in use.", {}, h.swap_used_bytes)
    f.add("dlrig_host_shm_total_bytes", "gauge", "Size of /dev/shm.", {}, h.shm_total_bytes)
    f.add(
        "dlrig_host_shm_used_bytes",
        "gauge",
        "Used /dev/shm (DataLoader workers).",
        {},
        h.shm_used_bytes,
    )
    f.add(
        "dlrig_host_disk_read_bytes_total",
        "counter",
        "Bytes read, all disks.",
        {},
        h.disk_read_bytes_total,
    )
    f.add(
        "dlrig_host_disk_written_bytes_total",
        "counter",
        "Bytes written, all disks.",
        {},
        h.disk_write_bytes_total,
    )
    f.add(
        "dlrig_host_network_receive_bytes_total",
        "counter",
        "Bytes received, physical interfaces.",
        {},
        h.network_receive_bytes_total,
    )
    f.add(
        "dlrig_host_network_transmit_bytes_total",
        "counter",
        "Bytes sent, physical interfaces.",
        {},
        h.network_transmit_bytes_total,
    )


def _xid_metrics(f: _Families, sample: Sample, dcgm_names: bool) -> None:
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
    f.add(
        "dlrig_exporter_last_sample_timestamp_seconds",
        "gauge",
        "When the sample on this page was taken (Unix time).",
        {},
        sample.timestamp_unix,
    )
    f.add(
        "dlrig_exporter_sample_duration_seconds",
        "gauge",
        "How long the last sampling round took.",
        {},
        sample.duration_seconds,
    )
    f.add("dlrig_exporter_samples_total", "counter", "Sampling rounds done.", {}, sample.sequence)
    f.add(
        "dlrig_exporter_errors_total",
        "counter",
        "Sampling rounds or listeners that failed (the exporter kept serving).",
        {},
        getattr(stats, "errors_total", 0) + getattr(stats, "listener_errors_total", 0),
    )


# --- dcgm-exporter names ---------------------------------------------------------------

_DCGM_GAUGES: tuple[tuple[str, str, Any], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
    ("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", lambda g: g.memory_clock_mhz),
    ("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).", lambda g: g.memory_temperature_c),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda g: g.temperature_c),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda g: g.power_draw_watts),
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda g: g.utilization_gpu_percent),
    (
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        lambda g: g.utilization_memory_percent,
    ),
    ("DCGM_FI_DEV_FAN_SPEED", "Fan speed (in %).", lambda g: g.fan_speed_percent),
    (
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        lambda g: None if g.memory_used_bytes is None else g.memory_used_bytes / 2**20,
    ),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        lambda g: (
            None
            if g.memory_used_bytes is None or g.memory_total_bytes is None
            else (g.memory_total_bytes - g.memory_used_bytes) / 2**20
        ),
    ),
    (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "Current clock throttle reasons (bitmask).",
        lambda g: (
            None if g.clocks_event_reasons is None else clock_event_mask(g.clocks_event_reasons)
        ),
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "Whether remapping of rows has failed",
        lambda g: None if g.remapped_rows.failure is None else float(g.remapped_rows.failure),
    ),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "Ratio of time the graphics engine is active.",
        lambda g: _ratio(g.graphics_activity_percent),
    ),
    (
        "DCGM_FI_PROF_SM_ACTIVE",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        lambda g: _ratio(g.sm_activity_percent),
    ),
    (
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "The ratio of number of warps resident on an SM.",
        lambda g: _ratio(g.sm_occupancy_percent),
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        lambda g: _ratio(g.tensor_activity_percent),
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        lambda g: _ratio(g.dram_activity_percent),
    ),
)

_DCGM_COUNTERS: tuple[tuple[str, str, Any], ...] = (
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "Total energy consumption since boot (in mJ).",
        lambda g: None if g.energy_consumed_joules is None else g.energy_consumed_joules * 1000,
    ),
    (
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "Total number of PCIe retries.",
        lambda g: g.pcie_replay_errors,
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Total number of single-bit volatile ECC errors.",
        lambda g: g.ecc_errors.volatile_corrected,
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
        lambda g: g.ecc_errors.volatile_uncorrected,
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for uncorrectable errors",
        lambda g: g.remapped_rows.uncorrectable,
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "Number of remapped rows for correctable errors",
        lambda g: g.remapped_rows.correctable,
    ),
)


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
        f.add(
            "dlrig_gpu_up",
            "gauge",
            "1 when the GPU answered in the last sample, 0 when it is lost or its reads hang.",
            {
                "gpu": str(reading.index),
                "UUID": (reading.gpu.uuid if reading.gpu is not None else None) or "",
            },
            1.0 if reading.up else 0.0,
        )
        if not reading.up or reading.gpu is None:
            continue
        g = reading.gpu
        _info_metric(f, g, {"gpu": str(reading.index), "uuid": g.uuid or ""}, info, hostname)
        labels = _dcgm_labels(g, hostname, info.driver_version)
        for name, doc, value in _DCGM_GAUGES:
            f.add(name, "gauge", doc, labels, value(g))
        for name, doc, value in _DCGM_COUNTERS:
            f.add(name, "counter", doc, labels, value(g))
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
            if mig.memory_used_bytes is not None:
                f.add(
                    "DCGM_FI_DEV_FB_USED",
                    "gauge",
                    "Framebuffer memory used (in MiB).",
                    mig_labels,
                    mig.memory_used_bytes / 2**20,
                )
            if mig.memory_used_bytes is not None and mig.memory_total_bytes is not None:
                f.add(
                    "DCGM_FI_DEV_FB_FREE",
                    "gauge",
                    "Framebuffer memory free (in MiB).",
                    mig_labels,
                    (mig.memory_total_bytes - mig.memory_used_bytes) / 2**20,
                )


# --- HTTP ----------------------------------------------------------------------------------


class MetricsPage:
    """The rendered page of the last sample, plain and gzip-compressed, swapped atomically."""

    def __init__(self, info: SourceInfo, options: ExporterOptions, stats: Any) -> None:
        self._info = info
        self._options = options
        self._stats = stats
        self._lock = threading.Lock()
        self._plain = b""
        self._gzipped = b""
        self.update(None)

    def update(self, sample: Sample | None) -> None:
        plain = render(sample, self._info, self._options, self._stats)
        gzipped = gzip.compress(plain, compresslevel=1)
        with self._lock:
            self._plain, self._gzipped = plain, gzipped

    def get(self, gzip_ok: bool) -> bytes:
        with self._lock:
            return self._gzipped if gzip_ok else self._plain


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_INDEX = (
    b"<html><head><title>dlrig exporter</title></head><body><h1>dlrig monitor</h1>"
    b'<p><a href="/metrics">Metrics</a></p></body></html>'
)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # bursts of concurrent scrapes must not be refused
    allow_reuse_address = True
    page: MetricsPage


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; without TCP_NODELAY the body waits for the
    # client's delayed ACK (40 ms on Linux) on every keep-alive scrape.
    disable_nagle_algorithm = True
    timeout = 30  # an idle keep-alive connection must not hold its thread for ever

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            gzip_ok = "gzip" in (self.headers.get("Accept-Encoding") or "")
            body = self.server.page.get(gzip_ok)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            if gzip_ok:
                self.send_header("Content-Encoding", "gzip")
        elif path in ("/", "/index.html"):
            body = _INDEX
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
        elif path == "/healthz":
            body = b"ok\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
        else:
            body = b"not found\n"
            self.send_response(404)
            self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return  # one line per scrape would flood the journal


class MetricsServer:
    """Serves a MetricsPage over HTTP from a background thread."""

    def __init__(self, page: MetricsPage, host: str, port: int) -> None:
        server_class: type[_Server] = _Server
        if ":" in host:  # an IPv6 address such as "::" or "::1"
            server_class = type("_Server6", (_Server,), {"address_family": socket.AF_INET6})
        try:
            self._server = server_class((host, port), _Handler)
        except OSError as exc:
            raise InputError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc}",
                fix="pick a free port with --port, or an address of this machine with --listen",
            ) from None
        self._server.page = page
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="dlrig-exporter", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

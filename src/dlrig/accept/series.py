"""The burn-in's time series, compact and column-shaped: what the verdicts judge and what the
report draws.

Each GPU has a track of readings (from the monitor's samples, or from the frames of a recorded
file in replay mode), the host has one, and each load worker reports what it achieved (TFLOP/s,
GB/s, MB/s). Times are seconds since the burn-in started; in replay mode they are the position
of the recorded reading (0, 1, 2, ...) and `labels` names each one ("capture.txt:load").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from dlrig.machine.model import Gpu

MAX_POINTS = 720  # per track in the document: a 15-minute burn-in at 1 s keeps every point

GPU_FIELDS = (
    "utilization_percent",
    "sm_clock_mhz",
    "memory_clock_mhz",
    "temperature_c",
    "power_watts",
    "power_limit_watts",
    "pcie_gen",
    "pcie_width",
    "pcie_replays",
    "ecc_corrected",
    "ecc_uncorrected",
    "memory_used_bytes",
)


@dataclass
class GpuTrack:
    index: int
    name: str | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    sm_clock_max_mhz: int | None = None
    power_default_limit_watts: float | None = None
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    memory_total_bytes: int | None = None
    temperature_slowdown_c: float | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    remap_failure: bool | None = None
    t: list[float] = field(default_factory=list)
    status: list[str] = field(default_factory=list)
    clock_events: list[tuple[str, ...] | None] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(
        default_factory=lambda: {name: [] for name in GPU_FIELDS}
    )
    labels: list[str] = field(default_factory=list)  # replay: which recording each point is

    def add(self, t: float, status: str, gpu: Gpu | None, label: str | None = None) -> None:
        self.t.append(t)
        self.status.append(status)
        if label is not None:
            self.labels.append(label)
        if gpu is None or status != "ok":
            self.clock_events.append(None)
            for name in GPU_FIELDS:
                self.values[name].append(None)
            return
        # Identity and limits: the latest reading that has them.
        self.name = gpu.name or self.name
        self.uuid = gpu.uuid or self.uuid
        self.pci_bus_id = gpu.pci_bus_id or self.pci_bus_id
        self.sm_clock_max_mhz = gpu.sm_clock_max_mhz or self.sm_clock_max_mhz
        self.power_default_limit_watts = (
            gpu.power_default_limit_watts or self.power_default_limit_watts
        )
        self.pcie_gen_max = gpu.pcie.gen_max or self.pcie_gen_max
        self.pcie_width_max = gpu.pcie.width_max or self.pcie_width_max
        self.memory_total_bytes = gpu.memory_total_bytes or self.memory_total_bytes
        self.temperature_slowdown_c = gpu.temperature_slowdown_c or self.temperature_slowdown_c
        self.retired_pages_pending = _sticky(self.retired_pages_pending, gpu.retired_pages.pending)
        self.remapped_rows_pending = _sticky(self.remapped_rows_pending, gpu.remapped_rows.pending)
        self.remap_failure = _sticky(self.remap_failure, gpu.remapped_rows.failure)
        self.clock_events.append(gpu.clocks_event_reasons)
        reading: dict[str, float | None] = {
            "utilization_percent": gpu.utilization_gpu_percent,
            "sm_clock_mhz": _num(gpu.sm_clock_mhz),
            "memory_clock_mhz": _num(gpu.memory_clock_mhz),
            "temperature_c": gpu.temperature_c,
            "power_watts": gpu.power_draw_watts,
            "power_limit_watts": gpu.power_limit_watts,
            "pcie_gen": _num(gpu.pcie.gen_current),
            "pcie_width": _num(gpu.pcie.width_current),
            "pcie_replays": _num(gpu.pcie_replay_errors),
            "ecc_corrected": _num(gpu.ecc_errors.volatile_corrected),
            "ecc_uncorrected": _num(gpu.ecc_errors.volatile_uncorrected),
            "memory_used_bytes": _num(gpu.memory_used_bytes),
        }
        for name in GPU_FIELDS:
            self.values[name].append(reading[name])

    def column(self, name: str) -> list[float | None]:
        return self.values[name]

    def shift(self, seconds: float) -> None:
        """Count time from `seconds` later (the burn-in's zero moved)."""
        self.t = [t - seconds for t in self.t]

    def to_dict(self) -> dict[str, Any]:
        keep = thin(len(self.t))
        return {
            "index": self.index,
            "name": self.name,
            "uuid": self.uuid,
            "pci_bus_id": self.pci_bus_id,
            "sm_clock_max_mhz": self.sm_clock_max_mhz,
            "power_default_limit_watts": self.power_default_limit_watts,
            "pcie_gen_max": self.pcie_gen_max,
            "pcie_width_max": self.pcie_width_max,
            "memory_total_bytes": self.memory_total_bytes,
            "temperature_slowdown_c": self.temperature_slowdown_c,
            "points": len(self.t),
            "t": [round(self.t[i], 2) for i in keep],
            "status": [self.status[i] for i in keep],
            "labels": [self.labels[i] for i in keep] if self.labels else [],
            "clock_events": [
                None if self.clock_events[i] is None else list(self.clock_events[i] or ())
                for i in keep
            ],
            **{name: [self.values[name][i] for i in keep] for name in GPU_FIELDS},
        }


@dataclass
class HostTrack:
    t: list[float] = field(default_factory=list)
    cpu_percent: list[float | None] = field(default_factory=list)
    iowait_percent: list[float | None] = field(default_factory=list)
    memory_used_bytes: list[float | None] = field(default_factory=list)
    disk_read_mb_s: list[float | None] = field(default_factory=list)
    disk_write_mb_s: list[float | None] = field(default_factory=list)
    memory_total_bytes: int | None = None
    _last: tuple[float, int | None, int | None] | None = None

    def add(
        self,
        t: float,
        cpu_percent: float,
        iowait_percent: float | None,
        memory_used_bytes: int,
        memory_total_bytes: int,
        disk_read_total: int | None,
        disk_write_total: int | None,
    ) -> None:
        self.t.append(t)
        self.cpu_percent.append(cpu_percent)
        self.iowait_percent.append(iowait_percent)
        self.memory_used_bytes.append(float(memory_used_bytes))
        self.memory_total_bytes = memory_total_bytes
        read_rate = write_rate = None
        if self._last is not None and t > self._last[0]:
            seconds = t - self._last[0]
            read_rate = _rate(self._last[1], disk_read_total, seconds)
            write_rate = _rate(self._last[2], disk_write_total, seconds)
        self.disk_read_mb_s.append(read_rate)
        self.disk_write_mb_s.append(write_rate)
        self._last = (t, disk_read_total, disk_write_total)

    def shift(self, seconds: float) -> None:
        """Count time from `seconds` later (the burn-in's zero moved)."""
        self.t = [t - seconds for t in self.t]
        if self._last is not None:
            self._last = (self._last[0] - seconds, self._last[1], self._last[2])

    def to_dict(self) -> dict[str, Any]:
        keep = thin(len(self.t))
        return {
            "points": len(self.t),
            "memory_total_bytes": self.memory_total_bytes,
            "t": [round(self.t[i], 2) for i in keep],
            **{
                name: [_round(getattr(self, name)[i]) for i in keep]
                for name in (
                    "cpu_percent",
                    "iowait_percent",
                    "memory_used_bytes",
                    "disk_read_mb_s",
                    "disk_write_mb_s",
                )
            },
        }


@dataclass
class LoadTrack:
    """What one kind of load worker achieved over time (summed over its workers)."""

    kind: Literal["gpu", "cpu", "memory", "disk"]
    subject: int | None  # the GPU index for gpu loads
    workers: int
    units: dict[str, str]  # metric -> unit ("tflops": "TFLOP/s")
    t: list[float] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)  # dtype, matrix size, file, ...
    error: str | None = None  # why this load stopped or never ran

    def add(self, t: float, metrics: dict[str, float]) -> None:
        self.t.append(t)
        for name in self.units:
            self.values.setdefault(name, []).append(metrics.get(name))

    def column(self, name: str) -> list[float | None]:
        return self.values.get(name, [])

    def to_dict(self) -> dict[str, Any]:
        keep = thin(len(self.t))
        return {
            "kind": self.kind,
            "subject": self.subject,
            "workers": self.workers,
            "units": dict(self.units),
            "detail": dict(self.detail),
            "error": self.error,
            "points": len(self.t),
            "t": [round(self.t[i], 2) for i in keep],
            **{name: [_round(self.column(name)[i]) for i in keep] for name in self.units},
        }


def thin(count: int, max_points: int = MAX_POINTS) -> list[int]:
    """Indices kept in a document: all of them up to `max_points`, else an even stride that
    always keeps the last point (verdicts are judged on every point before this)."""
    if count <= max_points:
        return list(range(count))
    step = count / max_points
    return sorted({int(i * step) for i in range(max_points)} | {count - 1})


def _sticky(previous: bool | None, new: bool | None) -> bool | None:
    """True once seen stays True (a pending retirement seen mid-run is evidence)."""
    if previous or new:
        return True
    return new if new is not None else previous


def _num(value: int | float | None) -> float | None:
    return None if value is None else float(value)


def _rate(before: int | None, after: int | None, seconds: float) -> float | None:
    if before is None or after is None or after < before:
        return None
    return (after - before) / seconds / 1e6


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)

"""The burn-in: load on every part while the monitor records, or the recorded readings of a
replay. The one module of `accept` that calls the monitor.

Live: the monitor's history recorder samples this machine into `history.db` in the out folder
(one sampler: the same readings the history holds feed the verdicts through a listener), the
load workers run for the burn-in's length, and everything stops in `finally`, a stop signal
included: the workers are killed, the history is closed with what it recorded, and the
partial result is returned with the signal's name for the document.

Replay: the files are the readings. Each recorded state (a capture's idle and load, or one
file) is one point per GPU; no load is generated and no history is written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from dlrig import lifecycle, monitor
from dlrig.accept import loads
from dlrig.accept.loads import Absent
from dlrig.accept.series import GpuTrack, HostTrack, LoadTrack
from dlrig.knowledge import xid as xid_table
from dlrig.machine.model import Machine, XidEvent
from dlrig.monitor.sampler import bus_key

if TYPE_CHECKING:  # the monitor is imported when a live burn-in starts
    from dlrig.monitor.finding import Reading

Progress = Callable[[str, float], None]


@dataclass
class BurnIn:
    mode: Literal["live", "replay"]
    planned_seconds: float
    interval_seconds: float | None
    source: dict[str, Any]
    seconds: float = 0.0
    history_db: str | None = None
    history_samples: int | None = None
    gpus: list[GpuTrack] = field(default_factory=list)
    host: HostTrack | None = None
    loads: list[LoadTrack] = field(default_factory=list)
    absent: list[Absent] = field(default_factory=list)
    xids: list[dict[str, Any]] = field(default_factory=list)  # during the run (or recorded)
    monitor_readings: list[Reading] = field(default_factory=list)
    stopped_by: str | None = None
    stop_signal: int | None = None
    load_pids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "planned_seconds": self.planned_seconds,
            "seconds": round(self.seconds, 2),
            "interval_seconds": self.interval_seconds,
            "source": self.source,
            "history_db": self.history_db,
            "history_samples": self.history_samples,
            "stopped_by": self.stopped_by,
            "load_worker_pids": list(self.load_pids),
            "absent": [a.to_dict() for a in self.absent],
            "gpus": [g.to_dict() for g in self.gpus],
            "host": None if self.host is None else self.host.to_dict(),
            "loads": [t.to_dict() for t in self.loads],
            "xids": self.xids,
            "monitor_readings": [r.to_dict() for r in self.monitor_readings],
        }


def interval_for(seconds: float) -> float:
    """About 120 samples over the burn-in, between 0.25 s and 2 s apart."""
    return min(2.0, max(0.25, round(seconds / 120.0, 2)))


class _Collector:
    """The sampler's listener: each sample becomes points of the GPU and host tracks."""

    def __init__(self, t0: float) -> None:
        self.t0 = t0
        self.gpus: dict[int, GpuTrack] = {}
        self.host = HostTrack()
        self.xids: tuple[Any, ...] = ()
        self.lock = threading.Lock()

    def __call__(self, sample: Any) -> None:
        t = sample.timestamp_unix - self.t0
        with self.lock:
            for reading in sample.gpus:
                track = self.gpus.setdefault(reading.index, GpuTrack(reading.index))
                track.add(t, reading.status, reading.gpu)
            h = sample.host
            if h is not None:
                self.host.add(
                    t,
                    h.cpu_percent,
                    h.cpu_iowait_percent,
                    h.memory_used_bytes,
                    h.memory_total_bytes,
                    h.disk_read_bytes_total,
                    h.disk_write_bytes_total,
                )
            self.xids = sample.xids

    def rebase(self, t0: float) -> None:
        """Count time from `t0` (when the load runs): earlier points go below zero."""
        with self.lock:
            shift = t0 - self.t0
            self.t0 = t0
            for track in self.gpus.values():
                track.shift(shift)
            self.host.shift(shift)


def run_live(
    machine: Machine,
    out_dir: Path,
    seconds: float,
    gpu_indices: Sequence[int],
    disk_dir: Path,
    disk_bytes: int,
    progress: Progress,
) -> BurnIn:
    interval = interval_for(seconds)
    source = monitor.open_source()
    info = source.info
    db = out_dir / "history.db"
    recorder = monitor.HistoryRecorder(
        source, db, interval_seconds=interval, host=True, gpu_indices=list(gpu_indices) or None
    )
    t0 = time.time()
    collector = _Collector(t0)
    recorder.sampler.add_listener(collector)
    result = BurnIn(
        "live",
        seconds,
        interval,
        info.to_dict(),
        history_db=str(db),
    )
    if info.gpu_count == 0:
        result.absent.append(loads.Absent("gpu", f"no GPU load or GPU readings: {info.note}"))
    load_set: loads.LoadSet | None = None
    started = time.monotonic()
    try:
        recorder.start()
        first = recorder.sampler.wait_for_sample(timeout=10.0)
        gpus = [
            (r.index, r.gpu.uuid if r.gpu is not None else None)
            for r in (first.gpus if first is not None else ())
        ]
        specs, absent = loads.plan(machine, gpus, disk_dir, disk_bytes)
        result.absent.extend(absent)
        load_set = loads.LoadSet(specs, seconds, interval, t0)
        progress(f"burn-in: starting the load ({sum(s.workers for s in specs)} workers)", 0.0)
        load_set.start()
        result.load_pids = load_set.pids()
        # The burn-in's length counts from when the load runs: a worker starting torch and
        # CUDA on a busy host can take seconds, which must not come out of the burn-in.
        load_set.wait_ready()
        started = time.monotonic()
        # "Seconds into the burn-in" count from here; the readings of the workers' start-up
        # stay in the series, before zero.
        load_start = time.time()
        collector.rebase(load_start)
        load_set.t0 = load_start
        waiter = threading.Event()
        while True:
            elapsed = time.monotonic() - started
            if elapsed >= seconds:
                break
            progress(
                f"burn-in: {load_set.running()} load worker(s), {_clock(elapsed)} of "
                f"{_clock(seconds)}",
                elapsed / seconds,
            )
            waiter.wait(min(1.0, seconds - elapsed))  # a stop signal raises Stopped here
    except lifecycle.Stopped as stop:
        result.stopped_by, result.stop_signal = stop.name, stop.signum
    finally:
        result.seconds = time.monotonic() - started
        if load_set is not None:
            load_set.stop()
        summary = recorder.stop()
        result.history_samples = summary.samples_written
    if load_set is not None:
        result.loads = load_set.tracks()
    with collector.lock:
        result.gpus = [collector.gpus[i] for i in sorted(collector.gpus)]
        result.host = collector.host
        result.xids = [_xid_count(x) for x in collector.xids]
    readings = monitor.read_situation(recorder.sampler.history())
    result.monitor_readings = list(readings)
    progress("burn-in: done", 1.0)
    return result


def run_replay(paths: Sequence[str], machine: Machine) -> BurnIn:
    """The recorded readings as the burn-in's points; Xid events from the recorded kernel log."""
    result = BurnIn("replay", 0.0, None, {"kind": "replay", "description": "", "note": None})
    result.absent.append(
        loads.Absent("load", "replay: the verdicts come from the recorded readings; no load")
    )
    if machine.gpus:
        source = monitor.open_source(replay=list(paths))
        try:
            result.source = source.info.to_dict()
            frames = getattr(source, "frames", ())
            tracks: dict[int, GpuTrack] = {}
            for position, frame in enumerate(frames):
                for gpu in frame.gpus:
                    track = tracks.setdefault(gpu.index, GpuTrack(gpu.index))
                    track.add(float(position), "ok", gpu, frame.label)
            result.gpus = [tracks[i] for i in sorted(tracks)]
        finally:
            source.close()
    else:
        result.source["description"] = "the recorded files hold no GPU readings"
        result.absent.append(
            loads.Absent("gpu readings", "the recorded files hold no GPU readings (kernel log)")
        )
    events = machine.kernel_log.xid_events if machine.kernel_log else ()
    result.xids = xid_counts(events, machine)
    return result


def xid_counts(events: Sequence[XidEvent], machine: Machine) -> list[dict[str, Any]]:
    """Kernel-log Xid events counted per (code, GPU), the GPU found by its PCI address."""
    by_bus = {}
    for gpu in machine.gpus or ():
        key = bus_key(gpu.pci_bus_id)
        if key is not None:
            by_bus[key] = gpu.index
    counted: dict[tuple[int, str | None], dict[str, Any]] = {}
    for event in events:
        key = bus_key(event.pci_bus_id)
        gpu_index = by_bus.get(key) if key is not None else None
        info = xid_table.lookup(event.code)
        slot = (event.code, event.pci_bus_id)
        entry = counted.setdefault(
            slot,
            {
                "code": event.code,
                "gpu": gpu_index,
                "pci_bus_id": event.pci_bus_id,
                "count": 0,
                "severity": info.severity if info else "unknown",
                "name": info.name if info else None,
                "example": event.message,
                "last_seen": event.timestamp,
            },
        )
        entry["count"] += 1
        entry["last_seen"] = event.timestamp or entry["last_seen"]
    return list(counted.values())


def _xid_count(xid: Any) -> dict[str, Any]:
    return {
        "code": xid.code,
        "gpu": xid.gpu_index,
        "pci_bus_id": xid.pci_bus_id,
        "count": xid.count,
        "severity": xid.severity,
        "name": xid.name,
        "example": None,
        "last_seen": xid.last_seen_unix,
    }


def _clock(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}:{rest:02d}"

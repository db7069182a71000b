"""The one sampler behind the live view, the exporter and the history.

A background thread takes a sample every `interval_seconds`. Each GPU is read by its own worker
thread with a deadline, so one GPU whose NVML calls hang (a GPU in trouble can block a call for
minutes) cannot stall the others or the exporter: it is reported as "hung" until its call comes
back, and no second call is queued behind the stuck one. A GPU that disappears is reported as
"lost" and the rest keep being read. Consumers never wait on hardware: they read the last
sample, or are called with each new one.
"""

from __future__ import annotations

import collections
import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Literal

from dlrig.errors import InputError
from dlrig.knowledge import xid as xid_table
from dlrig.machine.gpu_source_base import GpuLost, GpuSource
from dlrig.machine.host_metrics import HostMeter, HostSample
from dlrig.machine.host_processes import HostProcess, ProcessMeter
from dlrig.machine.model import Gpu, XidEvent
from dlrig.machine.readers.kernel_log import event_unix
from dlrig.monitor.sample import GpuReading, Sample, XidCount

log = logging.getLogger(__name__)

Listener = Callable[[Sample], None]


class _DeviceWorker:
    """One daemon thread per GPU: a hung NVML call blocks only its own GPU (and never exit)."""

    def __init__(self, index: int, read: Callable[[int], Gpu]) -> None:
        self.index = index
        self._read = read
        self._lock = threading.Lock()
        self._pending: Future[Gpu] | None = None
        self._busy_since: float | None = None
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=f"dlrig-gpu{index}", daemon=True)
        self._thread.start()

    @property
    def busy_since(self) -> float | None:
        with self._lock:
            return self._busy_since

    def submit(self, now: float) -> Future[Gpu] | None:
        """A future for a new reading; None while the previous call has not returned."""
        with self._lock:
            if self._busy_since is not None:
                return None
            future: Future[Gpu] = Future()
            self._pending = future
            self._busy_since = now
            self._wake.notify()
            return future

    def _run(self) -> None:
        while True:
            with self._lock:
                while self._pending is None and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                future = self._pending
                self._pending = None
            assert future is not None
            try:
                result: Gpu | None = self._read(self.index)
                error: BaseException | None = None
            except BaseException as exc:  # noqa: BLE001 - every failure is reported, not raised
                result, error = None, exc
            # Free before completing: a round that sees the answer must also see the worker idle.
            with self._lock:
                self._busy_since = None
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)  # type: ignore[arg-type]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify()


_BUS = re.compile(r"([0-9a-fA-F]+):([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})(?:\.[0-7])?$")


def bus_key(pci_bus_id: str | None) -> tuple[int, int, int] | None:
    """PCI address as (domain, bus, device): NVML writes 00000000:83:00.0, dmesg 0000:83:00."""
    if not pci_bus_id:
        return None
    match = _BUS.search(pci_bus_id.strip().removeprefix("PCI:"))
    if not match:
        return None
    return (int(match.group(1), 16), int(match.group(2), 16), int(match.group(3), 16))


@dataclass
class _XidState:
    counts: dict[tuple[str | None, int], XidCount] = field(default_factory=dict)


def selected_gpus(source: GpuSource, gpu_indices: Sequence[int] | None) -> list[int]:
    """The GPUs to read: all of the source's, or the `--gpu-index` ones (InputError for an
    index the source does not have)."""
    count = source.info.gpu_count
    if not gpu_indices:
        return list(range(count))
    if count == 0:
        raise InputError(
            f"--gpu-index {gpu_indices[0]}: {source.info.description}"
            + (f" ({source.info.note})" if source.info.note else ""),
            fix="drop --gpu-index, or replay a recording with --replay FILE",
        )
    for index in gpu_indices:
        if not 0 <= index < count:
            raise InputError(
                f"--gpu-index {index}: {source.info.description} has GPUs 0 to {count - 1}",
                fix="give an index from `dlrig monitor --once` (NVML's numbering)",
            )
    return sorted(set(gpu_indices))


def named_here(gpus: Sequence[GpuReading]) -> set[int]:
    """The pids of the GPUs' processes that NVML's reader could name on this host: one it could
    not belongs to another PID namespace (a container), and its number here is someone else."""
    return {
        p.pid
        for r in gpus
        if r.up and r.gpu is not None
        for p in r.gpu.processes or ()
        if p.name is not None
    }


class Sampler:
    """Samples `source` in the background; `latest()` and listeners see each finished round.

    `gpu_indices` reads only those GPUs (NVML's numbering; a replay's in file order).
    `host_processes` adds the host's view of the GPU processes to each sample (default: with
    `host`, for live sources only)."""

    def __init__(
        self,
        source: GpuSource,
        interval_seconds: float = 1.0,
        call_timeout_seconds: float = 2.0,
        host: bool = True,
        keep: int = 600,
        gpu_indices: Sequence[int] | None = None,
        host_processes: bool | None = None,
    ) -> None:
        if interval_seconds <= 0:
            raise ValueError("interval_seconds must be positive")
        indices = selected_gpus(source, gpu_indices)
        self.source = source
        self.interval_seconds = interval_seconds
        # A deadline, not a budget: a slow GPU (PCIe throughput alone is sampled over 20 ms
        # per direction) still answers; only a call stuck past it counts as hung.
        self.call_timeout_seconds = call_timeout_seconds
        self._host = HostMeter() if host else None
        # The host's view of the GPU processes (user, CPU %, ...); by default only for live
        # sources: a replay's pids are another machine's.
        if host_processes is None:
            host_processes = host and getattr(source.info, "kind", None) != "replay"
        self._processes = ProcessMeter() if host_processes else None
        self._workers = [_DeviceWorker(i, source.read_gpu) for i in indices]
        self._last_good: dict[int, Gpu] = {}
        self._xid = _XidState()
        self._history: collections.deque[Sample] = collections.deque(maxlen=keep)
        self._latest: Sample | None = None
        self._listeners: list[Listener] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._sequence = 0
        self.errors_total = 0  # rounds where something outside the GPU reads failed
        self.listener_errors_total = 0

    # --- consumers ---------------------------------------------------------------------

    def add_listener(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def latest(self) -> Sample | None:
        with self._lock:
            return self._latest

    def history(self) -> tuple[Sample, ...]:
        with self._lock:
            return tuple(self._history)

    # --- the loop ------------------------------------------------------------------------

    def start(self) -> Sampler:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="dlrig-sampler", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> bool:
        """Stop sampling; False when the loop did not finish in time (a listener is stuck)."""
        self._stop.set()
        stopped = True
        if self._thread is not None:
            self._thread.join(timeout=self.call_timeout_seconds + 5.0)
            stopped = not self._thread.is_alive()
        for worker in self._workers:
            worker.close()
        self.source.close(calls_in_flight=any(w.busy_since is not None for w in self._workers))
        return stopped

    def wait_for_sample(self, after: int = 0, timeout: float = 10.0) -> Sample | None:
        """Block until a sample with sequence > `after` exists (tests, --once)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            latest = self.latest()
            if latest is not None and latest.sequence > after:
                return latest
            time.sleep(0.005)
        return self.latest()

    def _loop(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # the exporter must outlive any one bad round
                self.errors_total += 1
                if self.errors_total % 1000 == 1:
                    log.exception("sampling round failed (%d so far)", self.errors_total)
            next_at += self.interval_seconds
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (suspended laptop, slow round): do not burst
                next_at = time.monotonic()
                delay = 0
            self._stop.wait(delay)

    def sample_once(self) -> Sample:
        """Take one round now (the loop calls this; `--once` and tests may too)."""
        started_wall = time.time()
        started = time.monotonic()
        self.source.advance(started)
        futures: dict[int, Future[Gpu]] = {}
        readings: dict[int, GpuReading] = {}
        for worker in self._workers:
            future = worker.submit(started)
            if future is None:
                busy = worker.busy_since or started
                readings[worker.index] = GpuReading(
                    worker.index,
                    "hung",
                    self._last_good.get(worker.index),
                    f"an NVML call has not returned for {started - busy:.1f} s",
                )
            else:
                futures[worker.index] = future
        if futures:
            wait_futures(list(futures.values()), timeout=self.call_timeout_seconds)
        for index, future in futures.items():
            readings[index] = self._reading(index, future)
        host: HostSample | None = None
        if self._host is not None:
            try:
                host = self._host.read()
            except Exception as exc:  # noqa: BLE001 - psutil in odd containers: no host row
                self.errors_total += 1
                if self.errors_total % 1000 == 1:
                    log.warning("host reading failed: %s", exc)
        gpus = tuple(readings[i] for i in sorted(readings))
        processes = self._host_processes(gpus)
        self._count_xid(self.source.drain_xid(), gpus, started_wall)
        with self._lock:
            self._sequence += 1
            sample = Sample(
                timestamp_unix=started_wall,
                duration_seconds=time.monotonic() - started,
                gpus=gpus,
                host=host,
                xids=tuple(self._xid.counts.values()),
                sequence=self._sequence,
                processes=processes,
            )
            self._latest = sample
            self._history.append(sample)
        for listener in self._listeners:
            try:
                listener(sample)
            except Exception:  # a full disk must not stop the exporter
                self.listener_errors_total += 1
                # Once with the traceback, then every 1000th: a failure repeats every sample.
                if self.listener_errors_total % 1000 == 1:
                    log.exception("sample listener failed (%d so far)", self.listener_errors_total)
        return sample

    def _host_processes(self, gpus: tuple[GpuReading, ...]) -> tuple[HostProcess, ...]:
        """The host's view of the processes NVML named here (a pid it could not name belongs
        to another PID namespace and is not looked up)."""
        if self._processes is None:
            return ()
        try:
            return self._processes.read(named_here(gpus))
        except Exception as exc:  # noqa: BLE001 - psutil in odd containers: no process details
            self.errors_total += 1
            if self.errors_total % 1000 == 1:
                log.warning("process reading failed: %s", exc)
            return ()

    def _reading(self, index: int, future: Future[Gpu]) -> GpuReading:
        if not future.done():
            return GpuReading(
                index,
                "hung",
                self._last_good.get(index),
                f"no answer within {self.call_timeout_seconds:.1f} s",
            )
        error = future.exception()
        if error is None:
            gpu = future.result()
            self._last_good[index] = gpu
            return GpuReading(index, "ok", gpu)
        status: Literal["lost", "error"] = "lost" if isinstance(error, GpuLost) else "error"
        return GpuReading(index, status, self._last_good.get(index), str(error) or repr(error))

    def _count_xid(self, events: list[XidEvent], gpus: tuple[GpuReading, ...], now: float) -> None:
        if not events:
            return
        by_bus = {}
        for reading in gpus:
            if reading.gpu is not None:
                key = bus_key(reading.gpu.pci_bus_id)
                if key is not None:
                    by_bus[key] = reading.index
        for event in events:
            key = bus_key(event.pci_bus_id)
            gpu_index = by_bus.get(key) if key is not None else None
            slot = (event.pci_bus_id if gpu_index is None else str(gpu_index), event.code)
            previous = self._xid.counts.get(slot)
            info = xid_table.lookup(event.code)
            self._xid.counts[slot] = XidCount(
                code=event.code,
                pci_bus_id=event.pci_bus_id,
                gpu_index=gpu_index,
                count=(previous.count if previous else 0) + 1,
                # A recorded event keeps the time its log line gives; a live one is "now".
                last_seen_unix=max(
                    event_unix(event.timestamp, now) or now,
                    previous.last_seen_unix if previous else 0.0,
                ),
                severity=info.severity if info else "unknown",
                name=info.name if info else None,
            )

"""The burn-in's load workers, seen from `dlrig accept`: which to start, and starting, watching
and stopping them.

Each worker is its own process (`python -m dlrig.accept.worker`) in its own session, so a
Ctrl-C at the terminal reaches dlrig alone and dlrig stops every worker itself: SIGTERM, then
SIGKILL for any still there after a grace period. What each reported stays in its LoadTrack.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

from dlrig.accept.series import LoadTrack
from dlrig.machine.model import Machine

GRACE_SECONDS = 3.0
READY_SECONDS = 120.0  # torch and CUDA start slowly on a busy host
MIB = 1024**2
DISK_MIN_FREE_BYTES = 256 * MIB

UNITS = {
    "gpu": {"tflops": "TFLOP/s", "copy_gb_s": "GB/s"},
    "cpu": {"hash_mb_s": "MB/s"},
    "memory": {"copy_gb_s": "GB/s"},
    "disk": {"write_mb_s": "MB/s", "read_mb_s": "MB/s", "mismatched_chunks": "chunks"},
}


@dataclass(frozen=True)
class LoadSpec:
    kind: Literal["gpu", "cpu", "memory", "disk"]
    subject: int | None  # GPU index
    workers: int
    args: tuple[str, ...]  # extra worker arguments
    cleanup: str | None = None  # a file to remove afterwards (the disk load's)


@dataclass(frozen=True)
class Absent:
    part: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"part": self.part, "reason": self.reason}


def plan(
    machine: Machine,
    gpus: list[tuple[int, str | None]],
    disk_dir: Path,
    disk_bytes: int,
    memory_bytes: int = 512 * MIB,
) -> tuple[list[LoadSpec], list[Absent]]:
    """What to load: every GPU given as (index, uuid), the CPU cores the GPUs' feeders leave,
    host memory, and the disk under `disk_dir`."""
    specs = [
        LoadSpec("gpu", index, 1, ("--index", str(index)) + (("--uuid", uuid) if uuid else ()))
        for index, uuid in gpus
    ]
    absent: list[Absent] = []
    threads = (machine.cpu.threads if machine.cpu else None) or os.cpu_count() or 1
    # Each GPU worker needs a core to launch its kernels; the CPU load takes the rest.
    specs.append(LoadSpec("cpu", None, max(1, threads - len(gpus)), ()))
    available = machine.memory.available_bytes if machine.memory else None
    size = memory_bytes if available is None else max(16 * MIB, min(memory_bytes, available // 8))
    specs.append(LoadSpec("memory", None, 1, ("--bytes", str(size))))
    try:
        free = shutil.disk_usage(disk_dir).free
    except OSError as exc:
        absent.append(Absent("disk", f"{disk_dir}: {exc.strerror}"))
        return specs, absent
    if free < DISK_MIN_FREE_BYTES:
        absent.append(
            Absent("disk", f"{disk_dir} has {free / MIB:.0f} MiB free; the disk load needs 256")
        )
        return specs, absent
    target = disk_dir / f".dlrig-accept-disk-{os.getpid()}.tmp"
    size = min(disk_bytes, free // 10)
    specs.append(
        LoadSpec("disk", None, 1, ("--path", str(target), "--bytes", str(size)), str(target))
    )
    return specs, absent


@dataclass
class _Worker:
    spec: LoadSpec
    process: subprocess.Popen[str]
    stderr: IO[str]
    reports: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None
    stopped_by_us: bool = False


class LoadSet:
    """Runs the planned workers; `tracks()` says what each kind of load achieved so far."""

    def __init__(self, specs: list[LoadSpec], seconds: float, interval: float, t0: float) -> None:
        self.specs = specs
        self.seconds = seconds
        self.interval = interval
        self.t0 = t0
        self._workers: list[_Worker] = []
        self._failed: dict[int, str] = {}  # spec position -> why a worker could not start
        self._lock = threading.Lock()

    def start(self) -> LoadSet:
        env = dict(os.environ)
        # torch numbers GPUs fastest-first by default, NVML by PCI bus: make them agree (the
        # worker also matches its GPU by UUID).
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        for position, spec in enumerate(self.specs):
            for _ in range(spec.workers):
                self._launch(position, spec, env)
        return self

    def _launch(self, position: int, spec: LoadSpec, env: dict[str, str]) -> None:
        command = [
            sys.executable,
            "-m",
            "dlrig.accept.worker",
            spec.kind,
            # The worker's own deadline is a backstop: dlrig stops it when the burn-in ends.
            "--seconds",
            f"{self.seconds + 60:.1f}",
            "--interval",
            f"{self.interval:g}",
            *spec.args,
        ]
        # Closed in stop(), after the worker's last words are read from it.
        stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115
        try:
            process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                text=True,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            stderr.close()
            self._failed[position] = f"cannot start the worker: {exc.strerror}"
            return
        worker = _Worker(spec, process, stderr)
        worker.reader = threading.Thread(
            target=self._read, args=(worker,), name=f"dlrig-load-{spec.kind}", daemon=True
        )
        worker.reader.start()
        self._workers.append(worker)

    def _read(self, worker: _Worker) -> None:
        assert worker.process.stdout is not None
        for line in worker.process.stdout:
            try:
                message: dict[str, Any] = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                if "error" in message:
                    worker.error = str(message["error"])
                    if isinstance(message.get("errno"), int):
                        worker.detail["errno"] = message["errno"]
                    worker.ready.set()
                elif message.get("ready"):
                    worker.detail.update(message.get("detail") or {})
                    worker.ready.set()
                elif "metrics" in message:
                    metrics = {k: float(v) for k, v in dict(message["metrics"]).items()}
                    # Unix time: `t0` may move to when the whole load runs (tracks()).
                    worker.reports.append((float(message["t"]), metrics))
        worker.ready.set()

    def wait_ready(self, timeout: float = READY_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        for worker in self._workers:
            worker.ready.wait(max(0.0, deadline - time.monotonic()))

    def running(self) -> int:
        return sum(1 for w in self._workers if w.process.poll() is None)

    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def tracks(self) -> list[LoadTrack]:
        """One track per planned load. Workers of one kind (one per CPU core) add up report by
        report: each reports at a fixed rate from its own start, so the k-th reports of all of
        them cover the same stretch of time."""
        with self._lock:
            result = []
            for position, spec in enumerate(self.specs):
                track = LoadTrack(spec.kind, spec.subject, spec.workers, dict(UNITS[spec.kind]))
                workers = [w for w in self._workers if w.spec is spec]
                track.error = self._failed.get(position) or next(
                    (w.error for w in workers if w.error), None
                )
                for worker in workers:
                    track.detail.update(worker.detail)
                reporting = [w.reports for w in workers if w.reports]
                for k in range(min((len(r) for r in reporting), default=0)):
                    entries = [r[k] for r in reporting]
                    summed: dict[str, float] = {}
                    for _, metrics in entries:
                        for name, value in metrics.items():
                            summed[name] = summed.get(name, 0.0) + value
                    track.add(max(t for t, _ in entries) - self.t0, summed)
                result.append(track)
            return result

    def stop(self) -> None:
        """SIGTERM every worker, SIGKILL what is left after the grace period, then record why
        any worker that stopped on its own did."""
        for worker in self._workers:
            if worker.process.poll() is None:
                worker.stopped_by_us = True
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        for worker in self._workers:
            try:
                worker.process.wait(max(0.05, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    worker.process.kill()
                worker.process.wait()
        for worker in self._workers:
            if worker.reader is not None:
                worker.reader.join(timeout=2.0)
            code = worker.process.returncode
            if code not in (0, None) and not worker.stopped_by_us and not worker.error:
                worker.stderr.seek(0)
                tail = worker.stderr.read()[-400:].strip().splitlines()
                worker.error = f"exited with code {code}" + (f": {tail[-1]}" if tail else "")
            worker.stderr.close()
        for spec in self.specs:
            if spec.cleanup:
                with contextlib.suppress(OSError):
                    os.unlink(spec.cleanup)

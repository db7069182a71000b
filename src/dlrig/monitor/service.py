"""The monitor's long-running services: the Prometheus exporter and the history recorder.

Both start everything they need in one call and stop it in `stop()` (also on `with` exit), so
the CLI only waits in between: for `--duration`, or until a signal arrives as
`dlrig.lifecycle.Stopped`. A service that cannot start (a port in use, a --db that cannot be
opened) stops again whatever it had started, NVML included, before the error reaches the caller.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from dlrig.errors import InputError
from dlrig.machine.gpu_source_base import GpuSource
from dlrig.monitor.exporter import ExporterOptions, MetricsPage, MetricsServer
from dlrig.monitor.history import BackgroundWriter, HistoryWriter, Retention
from dlrig.monitor.sample import Sample
from dlrig.monitor.sampler import Sampler


class _Service:
    def stop(self) -> object:
        raise NotImplementedError

    def __enter__(self) -> Any:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ExporterService(_Service):
    """Samples `source` and serves the last sample at http://LISTEN:PORT/metrics (and records
    it into `db` when given). The source belongs to the service from here on."""

    def __init__(
        self,
        source: GpuSource,
        *,
        port: int,
        listen: str = "127.0.0.1",
        interval_seconds: float = 1.0,
        host: bool = True,
        dcgm_names: bool = False,
        amd_names: bool = False,
        db: str | Path | None = None,
        gpu_indices: Sequence[int] | None = None,
    ) -> None:
        self.source = source
        with contextlib.ExitStack() as undo:
            undo.callback(source.close)
            if dcgm_names or amd_names:
                _check_naming(source, "amd" if amd_names else "dcgm")
            # The history first: a --db that cannot be opened fails before a port is taken.
            writer = None
            if db is not None:
                writer = BackgroundWriter(HistoryWriter(db, source=source.info.description))
                undo.callback(writer.close)
            sampler = Sampler(
                source, interval_seconds=interval_seconds, host=host, gpu_indices=gpu_indices
            )
            undo.pop_all()  # the sampler closes the source from here on
            if writer is not None:
                undo.callback(writer.close)
            undo.callback(sampler.stop)  # stopped first: no sample reaches a closed writer
            page = MetricsPage(
                source.info, ExporterOptions(dcgm_names=dcgm_names, amd_names=amd_names), sampler
            )
            server = MetricsServer(page, listen, port)
            undo.callback(server.stop)
            sampler.add_listener(page.update)
            if writer is not None:
                sampler.add_listener(writer)
            sampler.start()
            server.start()
            undo.pop_all()
        self.sampler, self.server, self.writer = sampler, server, writer
        self._stopped = False

    @property
    def address(self) -> tuple[str, int]:
        return self.server.address

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self.server.stop()
        finally:
            finished = self.sampler.stop()
            # A listener still stuck in a write keeps the database; do not close it under it.
            if self.writer is not None and finished:
                self.writer.close()


@dataclass(frozen=True)
class RecordSummary:
    db: str
    samples_written: int
    samples_dropped: int
    error: str | None  # why writing stopped early (disk full, file removed), else None


class HistoryRecorder(_Service):
    """Samples `source` into the SQLite history `db` from background threads."""

    def __init__(
        self,
        source: GpuSource,
        db: str | Path,
        *,
        retention: Retention | None = None,
        interval_seconds: float = 1.0,
        host: bool = True,
        gpu_indices: Sequence[int] | None = None,
    ) -> None:
        self.db = str(db)
        try:
            self.writer = BackgroundWriter(
                HistoryWriter(db, retention, source=source.info.description)
            )
        except BaseException:
            source.close()
            raise
        try:
            self.sampler = Sampler(
                source, interval_seconds=interval_seconds, host=host, gpu_indices=gpu_indices
            )
        except BaseException:
            self.writer.close()
            source.close()
            raise
        self._failed: list[BaseException] = []
        self._failure = threading.Event()
        self.sampler.add_listener(self._write)
        self._summary: RecordSummary | None = None

    def _write(self, sample: Sample) -> None:
        # A recorder that cannot write (disk full, file removed) stops and says why.
        try:
            self.writer(sample)
        except Exception as exc:  # noqa: BLE001 - reported in the summary
            self._failed.append(exc)
            self._failure.set()

    def start(self) -> HistoryRecorder:
        self.sampler.start()
        return self

    def wait(self, seconds: float | None = None) -> None:
        """Until `seconds` pass or writing fails; a signal raises Stopped from inside."""
        self._failure.wait(seconds)

    def stop(self) -> RecordSummary:
        if self._summary is not None:
            return self._summary
        if self.sampler.stop():
            self.writer.close()
        failed = self._failed or ([self.writer.error] if self.writer.error is not None else [])
        self._summary = RecordSummary(
            db=self.db,
            samples_written=self.writer.writer.samples_written,
            samples_dropped=self.writer.dropped,
            error=str(failed[0]) if failed else None,
        )
        return self._summary


_VENDOR_WORDS = {"nvidia": "NVIDIA", "amd": "AMD", "intel-gaudi": "Intel Gaudi"}


def _check_naming(source: GpuSource, naming: str) -> None:
    """dcgm-exporter's names describe NVIDIA GPUs and AMD's exporter's AMD ones: serving another
    vendor's GPUs under them would feed dashboards series that mean something else."""
    vendors = set()
    for index in range(source.info.gpu_count):
        try:
            vendors.add(source.read_gpu(index).vendor or "nvidia")
        except Exception:  # noqa: BLE001 - a GPU that cannot be read says nothing of its vendor
            continue
    wanted = "nvidia" if naming == "dcgm" else "amd"
    others = sorted(_VENDOR_WORDS.get(v, v) for v in vendors - {wanted})
    if others:
        flag, tool = (
            ("--dcgm-names", "dcgm-exporter")
            if naming == "dcgm"
            else (
                "--amd-names",
                "AMD device-metrics-exporter",
            )
        )
        raise InputError(
            f"{flag}: {tool}'s names are for {_VENDOR_WORDS[wanted]} GPUs; this source has "
            f"{' and '.join(others)} GPUs",
            fix=f"leave {flag} out to serve dlrig's names, which cover every vendor",
        )

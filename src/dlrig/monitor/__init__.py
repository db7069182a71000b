"""`dlrig monitor`: one sampler behind a live view, a Prometheus exporter and a history.

Python API:

    from dlrig import monitor
    source = monitor.open_source(replay=["capture.txt"])      # or open_source() for this machine
    sampler = monitor.Sampler(source, interval_seconds=1.0).start()
    sample = sampler.wait_for_sample()
    for line in monitor.read_situation(sampler.history()):
        print(line.text)
    sampler.stop()                                             # also closes the source

    with monitor.ExporterService(monitor.open_source(), port=9480) as exporter:
        ...                                                    # serving until the block ends

`open_source()` never fails for want of GPUs: without NVML it reads `nvidia-smi`, and without
that it returns a source with no GPUs whose `info.note` says why (the host is still sampled).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlrig.machine.gpu_sources import (
    GpuSource,
    NoGpuSource,
    NvmlSource,
    ReplaySource,
    SmiSource,
    SourceInfo,
    open_live_source,
)
from dlrig.monitor.finding import Reading
from dlrig.monitor.reading import read_situation
from dlrig.monitor.sample import SCHEMA_VERSION, GpuReading, Sample, XidCount
from dlrig.monitor.sampler import Sampler
from dlrig.monitor.service import ExporterService, HistoryRecorder, RecordSummary
from dlrig.report import Progress, envelope, no_progress

__all__ = [
    "ExporterService",
    "GpuReading",
    "GpuSource",
    "HistoryRecorder",
    "MonitorOptions",
    "MonitorReport",
    "NoGpuSource",
    "NvmlSource",
    "Reading",
    "RecordSummary",
    "ReplaySource",
    "Sample",
    "Sampler",
    "SmiSource",
    "SourceInfo",
    "XidCount",
    "once",
    "open_source",
    "read_situation",
    "run",
    "sample_document",
]

DEFAULT_PORT = 9480


def open_source(
    replay: Sequence[str] = (),
    replay_state: str | None = None,
    frame_seconds: float = 30.0,
    replicate: int | None = None,
) -> GpuSource:
    """A replay of recorded files when `replay` names some; else this machine's GPUs through
    NVML, nvidia-smi, or none (see `info.note` for why)."""
    if replay:
        return ReplaySource(
            replay, state=replay_state, frame_seconds=frame_seconds, replicate=replicate
        )
    return open_live_source()


def once(
    source: GpuSource,
    host: bool = True,
    settle_seconds: float = 0.5,
    gpu_indices: Sequence[int] | None = None,
) -> list[Sample]:
    """Two samples `settle_seconds` apart (CPU use needs an interval); the source is closed."""
    try:
        sampler = Sampler(
            source, interval_seconds=max(settle_seconds, 0.05), host=host, gpu_indices=gpu_indices
        )
    except BaseException:
        source.close()
        raise
    try:
        first = sampler.sample_once()
        time.sleep(settle_seconds)
        second = sampler.sample_once()
    finally:
        sampler.stop()
    return [first, second]


def sample_document(sample: Sample, info: SourceInfo, readings: list[Reading]) -> dict[str, Any]:
    """The `--once --json` document."""
    return envelope(
        "dlrig.monitor.sample",
        SCHEMA_VERSION,
        {
            "source": info.to_dict(),
            "sample": sample.to_dict(),
            "readings": [r.to_dict() for r in readings],
        },
    )


@dataclass(frozen=True)
class MonitorOptions:
    """One reading of the GPUs and the host: what `dlrig monitor --once` takes."""

    replay: tuple[str, ...] = ()  # recorded nvidia-smi / rocm-smi / hl-smi output instead
    replay_state: str | None = None  # of a capture: only this state (e.g. "load")
    gpu_indices: tuple[int, ...] | None = None  # NVML's numbering; None: every GPU
    host: bool = True  # CPU, memory and disk too
    settle_seconds: float = 0.5  # between the two samples (CPU use needs an interval)


@dataclass(frozen=True)
class MonitorReport:
    """Two samples and what the last window of them means (`dlrig monitor --once --json`)."""

    source: SourceInfo
    samples: tuple[Sample, ...]
    readings: tuple[Reading, ...]

    def to_dict(self) -> dict[str, Any]:
        return sample_document(self.samples[-1], self.source, list(self.readings))


def run(
    options: MonitorOptions | None = None, *, progress: Progress = no_progress
) -> MonitorReport:
    """One reading of this machine's GPUs (or of `options.replay`) and the readings of it.

    No `machine` argument: the monitor reads the GPUs itself, through NVML or nvidia-smi."""
    options = options or MonitorOptions()
    progress("monitor: opening the GPU source", 0.0)
    source = open_source(options.replay, options.replay_state)
    samples = once(
        source,
        host=options.host,
        settle_seconds=options.settle_seconds,
        gpu_indices=options.gpu_indices,
    )
    progress("monitor: done", 1.0)
    return MonitorReport(source.info, tuple(samples), tuple(read_situation(samples)))

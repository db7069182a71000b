"""`dlrig monitor`: one sampler behind a live view, a Prometheus exporter and a history.

Python API:

    from dlrig import monitor
    source = monitor.open_source(replay=["capture.txt"])      # or open_source() for NVML
    sampler = monitor.Sampler(source, interval_seconds=1.0).start()
    sample = sampler.wait_for_sample()
    for line in monitor.read_situation(sampler.history()):
        print(line.text)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from dlrig.errors import DlrigError
from dlrig.machine.gpu_sources import GpuSource, NvmlSource, ReplaySource, SourceInfo
from dlrig.machine.nvml import NvmlUnavailable
from dlrig.monitor.reading import Reading, read_situation
from dlrig.monitor.sample import SCHEMA_VERSION, GpuReading, Sample, XidCount
from dlrig.monitor.sampler import Sampler

__all__ = [
    "GpuReading",
    "Reading",
    "Sample",
    "Sampler",
    "SourceInfo",
    "XidCount",
    "once",
    "open_source",
    "read_situation",
    "sample_document",
]

DEFAULT_PORT = 9480


def open_source(
    replay: Sequence[str] = (),
    replay_state: str | None = None,
    frame_seconds: float = 30.0,
    replicate: int | None = None,
) -> GpuSource:
    """NVML on this machine, or a replay of recorded files when `replay` names some."""
    if replay:
        return ReplaySource(
            replay, state=replay_state, frame_seconds=frame_seconds, replicate=replicate
        )
    try:
        return NvmlSource()
    except NvmlUnavailable as exc:
        raise DlrigError(
            f"cannot read the GPUs through NVML: {exc}",
            fix="run `dlrig doctor` to see why (no driver, driver/library mismatch), or "
            "replay a recording with --replay FILE",
        ) from None


def once(source: GpuSource, host: bool = True, settle_seconds: float = 0.5) -> list[Sample]:
    """Two samples `settle_seconds` apart (CPU use needs an interval); the source is closed."""
    sampler = Sampler(source, interval_seconds=max(settle_seconds, 0.05), host=host)
    try:
        first = sampler.sample_once()
        time.sleep(settle_seconds)
        second = sampler.sample_once()
    finally:
        sampler.stop()
    return [first, second]


def sample_document(sample: Sample, info: SourceInfo, readings: list[Reading]) -> dict[str, Any]:
    """The `--once --json` document."""
    return {
        "schema": "dlrig.monitor.sample",
        "schema_version": SCHEMA_VERSION,
        "source": {
            "kind": info.kind,
            "description": info.description,
            "hostname": info.hostname,
            "driver_version": info.driver_version,
            "cuda_version": info.cuda_version,
        },
        "sample": sample.to_dict(),
        "readings": [r.to_dict() for r in readings],
    }

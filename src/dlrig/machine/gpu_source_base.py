"""What every source of GPU readings answers: the `GpuSource` protocol and `SourceInfo`.

Sources are built once and read many times (a recording is parsed once, NVML stays initialised
for the life of the sampler). Reads may be slow or never return: the sampler calls `read_gpu`
from one worker thread per GPU with a deadline, so a source never guards against that itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from dlrig.machine.model import Gpu, XidEvent
from dlrig.machine.nvml import GpuLost

__all__ = ["GpuLost", "GpuSource", "SourceInfo", "now_iso"]


@dataclass(frozen=True)
class SourceInfo:
    kind: str  # nvml | amdsmi | nvidia-smi | replay | none
    description: str
    hostname: str
    gpu_count: int
    driver_version: str | None = None
    cuda_version: str | None = None
    # Why there are no GPU readings (kind "none"), or what was tried before this source.
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The `source` object of monitor's and accept's JSON documents."""
        return asdict(self)


class GpuSource(Protocol):
    info: SourceInfo

    def read_gpu(self, index: int) -> Gpu:
        """One reading of GPU `index`; raises GpuLost when it is gone."""
        ...

    def drain_xid(self) -> list[XidEvent]:
        """Xid events that arrived since the previous call."""
        ...

    def advance(self, now: float) -> None:
        """Called once per sampling round before the reads (a replay picks its frame)."""
        ...

    def close(self, calls_in_flight: bool = False) -> None:
        """Release the source; `calls_in_flight`: some read has not returned yet."""
        ...


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")

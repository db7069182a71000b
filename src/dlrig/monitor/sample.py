"""One sampling round: every GPU's reading (or why there is none), the host, Xid counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from dlrig.machine.host_metrics import HostSample
from dlrig.machine.host_processes import HostProcess
from dlrig.machine.model import Gpu
from dlrig.plain import to_plain as _to_plain

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class GpuReading:
    index: int
    status: Literal["ok", "lost", "hung", "error"]
    gpu: Gpu | None = None  # the reading; for lost/hung/error the last good one, if any
    error: str | None = None

    @property
    def up(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class XidCount:
    """Xid events of one code on one GPU since the sampler started (a counter, not a gauge)."""

    code: int
    pci_bus_id: str | None
    gpu_index: int | None  # None when the bus id matches no GPU of the source
    count: int
    last_seen_unix: float
    severity: str  # info | warn | critical (the Xid table's words) | unknown
    name: str | None


@dataclass(frozen=True)
class Sample:
    timestamp_unix: float
    duration_seconds: float  # how long the round took (the sampler's cost)
    gpus: tuple[GpuReading, ...]
    host: HostSample | None
    xids: tuple[XidCount, ...]
    sequence: int
    # The host's view of the GPUs' processes (live sources only; a replay's pids are not ours).
    processes: tuple[HostProcess, ...] = ()

    def readable(self) -> tuple[Gpu, ...]:
        """GPUs read in this round."""
        return tuple(r.gpu for r in self.gpus if r.up and r.gpu is not None)

    def to_dict(self) -> dict[str, Any]:
        plain: dict[str, Any] = _to_plain(self)
        if self.host is not None:
            plain["host"]["cpu_percent"] = self.host.cpu_percent
        return plain

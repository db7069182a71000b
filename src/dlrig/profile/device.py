"""What the GPU itself reported over the profiled window: NVML's utilisation and, on Hopper and
newer, GPM's SM, tensor-core and DRAM activity (what DCGM's PROF_* fields report).

The trace says which kernels ran; the counters say how busy the SMs were while they ran. A
GPU at 100 % "utilisation" (some kernel was running) with 30 % SM activity (most SMs idle) is
the seeds' low `sm_efficiency` case, and only the two together show it. While `dlrig profile
-- CMD` runs, a thread reads every GPU a few times a second (`watch.Watcher`); the readings inside
each rank's profiled window, on the GPU that rank used, are averaged (`activity`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

FIELDS = (
    "utilization_gpu_percent",
    "sm_activity_percent",
    "tensor_activity_percent",
    "dram_activity_percent",
)


@dataclass(frozen=True)
class Reading:
    unix_s: float
    gpu: int
    values: dict[str, float | None]
    uuid: str | None = None


def same_uuid(a: str | None, b: str | None) -> bool:
    """NVML says GPU-<uuid>, torch the bare uuid."""
    if not a or not b:
        return False
    return a.lower().removeprefix("gpu-") == b.lower().removeprefix("gpu-")


@dataclass(frozen=True)
class DeviceActivity:
    gpu: int
    samples: int
    means: dict[str, float | None]  # FIELDS -> mean over the window, None where not read
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "samples": self.samples,
            **{k: None if v is None else round(v, 1) for k, v in self.means.items()},
            "note": self.note,
        }


def activity(
    readings: Sequence[Reading],
    gpu: int,
    start_unix_s: float,
    end_unix_s: float,
    uuid: str | None = None,
) -> DeviceActivity | None:
    """The mean of each counter over the readings of the rank's GPU inside the window (the one
    nearest its middle when the window is shorter than the reading interval); None without
    any. The GPU is found by `uuid` where the rank recorded it (CUDA_VISIBLE_DEVICES makes
    the process's device 0 any of the machine's GPUs), else by index."""
    mine = [r for r in readings if same_uuid(r.uuid, uuid)] if uuid else []
    if mine:
        gpu = mine[0].gpu
    else:
        mine = [r for r in readings if r.gpu == gpu]
    if not mine:
        return None
    inside = [r for r in mine if start_unix_s <= r.unix_s <= end_unix_s]
    note = None
    if not inside:
        middle = (start_unix_s + end_unix_s) / 2
        nearest = min(mine, key=lambda r: abs(r.unix_s - middle))
        if abs(nearest.unix_s - middle) > max(1.0, end_unix_s - start_unix_s):
            return None
        inside = [nearest]
        note = "the window is shorter than the reading interval: the nearest reading"
    means: dict[str, float | None] = {}
    for name in FIELDS:
        values = [r.values[name] for r in inside if r.values.get(name) is not None]
        means[name] = statistics.fmean(v for v in values if v is not None) if values else None
    if means["sm_activity_percent"] is None:
        note = (note + "; " if note else "") + (
            "no SM activity counter (GPM needs a Hopper or newer GPU and a recent driver)"
        )
    return DeviceActivity(gpu, len(inside), means, note)

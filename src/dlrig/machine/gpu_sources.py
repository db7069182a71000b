"""Where the monitor's GPU readings come from: NVML, nvidia-smi, a recording, or none.

`open_live_source()` tries NVML first (microseconds a reading), then the `nvidia-smi` program
(where only that works), and otherwise gives a source with no GPUs whose `info.note` says why,
so the monitor still shows the host and the reason instead of nothing. A recording is opened
with `ReplaySource`. Every source answers the `GpuSource` protocol.
"""

from __future__ import annotations

import dataclasses
import socket

from dlrig.machine.amdsmi_library import AmdSmiUnavailable
from dlrig.machine.amdsmi_source import AmdSmiSource
from dlrig.machine.gpu_source_base import GpuSource, SourceInfo, now_iso
from dlrig.machine.model import Gpu, XidEvent
from dlrig.machine.nvml import GpuLost, NvmlUnavailable
from dlrig.machine.nvml_source import NvmlSource
from dlrig.machine.replay_source import ReplayFrame, ReplaySource
from dlrig.machine.smi_source import SmiSource, SmiUnavailable

__all__ = [
    "GpuLost",
    "GpuSource",
    "NoGpuSource",
    "NvmlSource",
    "ReplayFrame",
    "ReplaySource",
    "SmiSource",
    "SourceInfo",
    "now_iso",
    "open_live_source",
]


class NoGpuSource:
    """No GPU can be read here; `info.note` says why. The host is still sampled."""

    def __init__(self, reason: str) -> None:
        self.info = SourceInfo(
            kind="none",
            description="no GPUs readable",
            hostname=socket.gethostname(),
            gpu_count=0,
            note=reason,
        )

    def read_gpu(self, index: int) -> Gpu:
        raise GpuLost(f"no GPU can be read here: {self.info.note}")

    def drain_xid(self) -> list[XidEvent]:
        return []

    def advance(self, now: float) -> None:
        return None

    def close(self, calls_in_flight: bool = False) -> None:
        return None


def open_live_source() -> GpuSource:
    """This machine's GPUs: through NVML, else AMD's amdsmi library, else nvidia-smi, else none
    (and why)."""
    try:
        return NvmlSource()
    except NvmlUnavailable as exc:
        nvml_reason = f"NVML: {exc}"
    try:
        amd: GpuSource = AmdSmiSource()
    except AmdSmiUnavailable as exc:
        if "not installed" not in str(exc):
            nvml_reason += f"; {exc}"
    else:
        amd.info = dataclasses.replace(amd.info, note=nvml_reason)
        return amd
    try:
        source = SmiSource()
    except SmiUnavailable as exc:
        return NoGpuSource(f"{nvml_reason}; {exc}")
    source.info = dataclasses.replace(source.info, note=f"{nvml_reason}; reading nvidia-smi")
    return source

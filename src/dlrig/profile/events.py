"""What `dlrig profile` keeps of a Kineto trace's events, and the collector that keeps it.

Kineto's categories changed names over the years and writers differ in how careful they are
with types, so each event is checked once here: the stream reader (`trace.py`) hands over the
events it decoded, the collector keeps the fields the analysis needs as plain tuples, and an
event with odd types or values goes through the careful path (or is dropped) instead of
stopping the analysis.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from math import isfinite
from typing import Any, Literal, NamedTuple

# Kineto's categories changed names over the years (PyTorch 1.8 wrote "Kernel", "Runtime",
# "Operator"; 1.9 and newer "kernel", "cuda_runtime", "cpu_op"). Both map to one kind.
GPU_KINDS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset"}
GPU_KINDS["memset"] = "memset"
RUNTIME_CATEGORIES = {
    "cuda_runtime",
    "runtime",
    "cuda_driver",
    "hip_runtime",
    "privateuse1_runtime",
}
HOST_CATEGORIES = {"cpu_op", "operator", "user_annotation"}
US_PER_MS = 1000.0  # traces count in µs; reports in ms
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
DATALOADER_PREFIX = "enumerate(DataLoader)#"
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"
# Launch calls: the host time they take is the "CPU launch overhead" of a step.
LAUNCH_NAMES = re.compile(
    r"^(cudaLaunchKernel|cudaLaunchKernelExC|cuLaunchKernel|cuLaunchKernelEx|cudaLaunchCooperative"
    r"|cudaGraphLaunch|hipLaunchKernel|hipExtLaunchKernel|hipExtModuleLaunchKernel|hipModuleLaunch"
    r"|hipGraphLaunch|cudaMemcpyAsync|hipMemcpyAsync|hipMemcpyWithStream|cudaMemsetAsync"
    r"|hipMemsetAsync)"
)


class HostEvent(NamedTuple):
    name: str
    start: float  # µs, the trace's own clock
    end: float
    tid: int
    flops: float = 0.0  # `with_flops=True` puts the operator's FLOPs in its args


# Tuples, not dataclasses: a trace holds hundreds of thousands of these.
class GpuEvent(NamedTuple):
    name: str
    kind: str  # kernel | memcpy | memset
    start: float
    end: float
    device: int
    stream: int
    correlation: int  # joins the runtime call that launched it; -1 when absent


@dataclass(frozen=True)
class Trace:
    path: str
    rank: int | None
    world_size: int | None
    device_name: str | None
    steps: tuple[HostEvent, ...]
    host: tuple[HostEvent, ...]  # data loading, forward/backward/optimizer markers, flops
    launches: dict[int, HostEvent]  # correlation id -> runtime call
    gpu: tuple[GpuEvent, ...]
    # Starts of ProfilerStep annotations on the GPU timeline (HTA counts them as steps too).
    gpu_step_starts: tuple[float, ...] = ()
    # Host events that carry a stream (Triton launches recorded as cpu_op): HTA's breakdown
    # counts every event with a stream as GPU work; kept only to compute its figure its way.
    stream_extras: tuple[GpuEvent, ...] = ()
    backend: str | None = None  # NCCL, RCCL, gloo from distributedInfo
    # The trace's clock in Unix µs: `ts` + this (Kineto's baseTimeNanoseconds; older traces
    # wrote Unix µs directly). None when the trace does not say.
    base_unix_us: float | None = None
    vendor: Literal["nvidia", "amd", "unknown"] = "unknown"  # from the runtime's names
    notes: tuple[str, ...] = field(default=())


def _flops(value: Any) -> float:
    try:
        number = float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return number if isfinite(number) and number > 0 else 0.0


def _int(value: Any, default: int = -1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class Collector:
    """Keeps what the analysis needs of each event, as it arrives."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.steps: list[HostEvent] = []
        self.host: list[HostEvent] = []
        self.launches: dict[int, HostEvent] = {}
        self.gpu: list[GpuEvent] = []
        self.gpu_steps: list[float] = []
        self.extras: list[GpuEvent] = []
        self.hip = False
        self.cuda = False

    def add_gpu(
        self, name: str, kind: str, start: float, end: float, args: dict[str, Any], event: Any
    ) -> None:
        """A kernel, copy or set whose name and times are checked. Hundreds of thousands of
        these: ints checked inline, converted rarely."""
        device = args.get("device")
        stream = args.get("stream")
        correlation = args.get("correlation", -1)
        self.gpu.append(
            GpuEvent(
                name,
                kind,
                start,
                end,
                device if type(device) is int else _int(device, _int(event.get("pid"), 0)),
                stream if type(stream) is int else _int(stream, _int(event.get("tid"), 0)),
                correlation if type(correlation) is int else _int(correlation),
            )
        )

    def add_launch(
        self, name: str, start: float, end: float, args: dict[str, Any], event: Any
    ) -> None:
        """A runtime call: kept when it launched GPU work (it has a correlation id)."""
        if not (self.hip or self.cuda):
            self.hip = name.startswith("hip")
            self.cuda = name.startswith("cu")
        correlation = args.get("correlation", -1)
        if type(correlation) is not int:
            correlation = _int(correlation)
        if correlation >= 0:
            tid = event.get("tid", 0)
            self.launches[correlation] = HostEvent(
                name, start, end, tid if type(tid) is int else _int(tid, 0)
            )

    def add(self, event: Any) -> None:
        """Any event, the careful way: types checked and converted, odd values dropped."""
        if not isinstance(event, dict) or event.get("ph") != "X":
            return
        category = event.get("cat")
        category = category.lower() if isinstance(category, str) else ""
        try:
            start = float(event["ts"])
            end = start + float(event.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            return
        if not isfinite(end) or end < start:  # 1e400 parses as infinity; NaN is not a time
            return
        name = event.get("name")
        if not isinstance(name, str):
            name = str(name)
        args = event.get("args")
        if not isinstance(args, dict):
            args = {}
        kind = GPU_KINDS.get(category)
        if kind is not None:
            self.add_gpu(name, kind, start, end, args, event)
        elif category in RUNTIME_CATEGORIES:
            self.add_launch(name, start, end, args, event)
        elif category == "gpu_user_annotation":
            if STEP_NAME.match(name):
                self.gpu_steps.append(start)
        elif category in HOST_CATEGORIES:
            if "stream" in args and _int(args.get("stream")) >= 0:
                self.extras.append(
                    GpuEvent(
                        name,
                        "kernel",
                        start,
                        end,
                        0,
                        _int(args["stream"]),
                        _int(args.get("correlation")),
                    )
                )
            if STEP_NAME.match(name):
                self.steps.append(HostEvent(name, start, end, _int(event.get("tid"), 0)))
            elif (
                name.startswith(DATALOADER_PREFIX)
                or name.startswith(OPTIMIZER_PREFIXES)
                or name.startswith(BACKWARD_PREFIX)
                or "flops" in args
            ):
                self.host.append(
                    HostEvent(
                        name, start, end, _int(event.get("tid"), 0), _flops(args.get("flops"))
                    )
                )

    def trace(self, document: dict[str, Any]) -> Trace:
        info = document.get("distributedInfo")
        info = info if isinstance(info, dict) else {}
        devices = document.get("deviceProperties")
        device_name = None
        if isinstance(devices, list) and devices and isinstance(devices[0], dict):
            device_name = str(devices[0].get("name") or "") or None
        notes: list[str] = []
        steps = _unique_steps(self.steps, notes)
        base = document.get("baseTimeNanoseconds")
        base_unix_us: float | None = None
        if isinstance(base, int | float) and base > 0:
            base_unix_us = base / 1000.0
        elif steps and steps[0].start > 1e15:  # already Unix µs (2001 onwards)
            base_unix_us = 0.0
        return Trace(
            path=self.label,
            rank=_int(info["rank"]) if "rank" in info else None,
            world_size=_int(info["world_size"]) if "world_size" in info else None,
            device_name=device_name,
            steps=tuple(steps),
            host=tuple(sorted(self.host, key=lambda e: e.start)),
            launches=self.launches,
            gpu=tuple(sorted(self.gpu, key=lambda e: e.start)),
            gpu_step_starts=tuple(self.gpu_steps),
            stream_extras=tuple(self.extras),
            backend=str(info["backend"]) if info.get("backend") else None,
            vendor="amd" if self.hip else "nvidia" if self.cuda else "unknown",
            notes=tuple(notes),
            base_unix_us=base_unix_us,
        )


def _unique_steps(steps: list[HostEvent], notes: list[str]) -> list[HostEvent]:
    """Steps in time order. Two annotations of one step number (a profiler restarted with
    `repeat`, or a warm-up step recorded twice) are both kept, numbered apart, and said."""
    steps.sort(key=lambda e: e.start)
    seen: dict[str, int] = {}
    out = []
    for step in steps:
        count = seen.get(step.name, 0)
        seen[step.name] = count + 1
        if count:
            notes.append(f"{step.name} appears {count + 1} times (a restarted profiler schedule)")
        out.append(step)
    return out

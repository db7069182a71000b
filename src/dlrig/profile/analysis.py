"""From a trace to where each step's time went: pure functions of `trace.Trace`.

Definitions (docs/commands/profile.md says the same for users):

- A **step** is the wall time of one `ProfilerStep#N` annotation on the host: from one
  `prof.step()` to the next, so it holds the wait for the next batch, forward, backward and
  the optimizer.
- **Host phases**: *data wait* is time inside the DataLoader's `__next__`; *backward* runs from
  the first to the last autograd-engine function of the step; *forward* from the end of the
  data wait before it to its start (the whole remainder in a step with no backward);
  *optimizer* is time inside `Optimizer.step`/`zero_grad`; *other* is what is left.
- **GPU parts** of the same wall time: *compute* is the union of every non-copy,
  non-communication kernel; *communication exposed* is communication not hidden under compute;
  *memcpy* is copies and sets not under either; *idle* is the rest, split into idle while the
  host waited for data and idle while the host did anything else (launch overhead, Python,
  synchronisation).
- A GPU event belongs to the step whose wall time its launching runtime call started in (the
  correlation id joins them); one with no launch found belongs to the step it ran in.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from dlrig.errors import InputError
from dlrig.knowledge import gpus
from dlrig.profile import device, hta, intervals, kernels
from dlrig.profile.events import (
    BACKWARD_PREFIX,
    DATALOADER_PREFIX,
    LAUNCH_NAMES,
    OPTIMIZER_PREFIXES,
    US_PER_MS,
    GpuEvent,
    HostEvent,
    Trace,
)
from dlrig.profile.intervals import Span
from dlrig.profile.model import (
    HOST_PHASES,
    KernelRow,
    Mfu,
    RankProfile,
    StepProfile,
)

TOP_KERNELS = 15
# Optimizer kernels that update many tensors per launch (foreach, fused, apex).
_FUSED = re.compile(
    r"multi_tensor|fused_?adam|fused_?sgd|fused_?lamb|foreach|triton_for_|_amp_foreach", re.I
)


def step_of(trace: Trace) -> list[int]:
    """For each GPU event of `trace.gpu`, the index of its step in `trace.steps`, or -1."""
    starts = [s.start for s in trace.steps]
    out = []
    for event in trace.gpu:
        launch = trace.launches.get(event.correlation) if event.correlation >= 0 else None
        when = launch.start if launch is not None else event.start
        i = bisect.bisect_right(starts, when) - 1
        if i >= 0 and when <= trace.steps[i].end:
            out.append(i)
        else:
            out.append(-1)
    return out


def analyse(
    trace: Trace,
    flops_per_step: float | None = None,
    flops_source: str | None = None,
    optimizers: dict[str, Any] | None = None,
    cpus_per_rank: int | None = None,
    readings: Sequence[device.Reading] = (),
    device_uuid: str | None = None,
) -> RankProfile:
    """The rank's profile. `flops_per_step` (from FlopCounterMode in a live run) replaces the
    FLOPs the trace's operators carry; `optimizers` (class name -> foreach/fused settings) is
    what a live run saw of the program's optimizers."""
    notes = list(trace.notes)
    has_gpu = bool(trace.gpu)
    owner = step_of(trace) if has_gpu else []
    by_step: dict[int, list[GpuEvent]] = defaultdict(list)
    for event, index in zip(trace.gpu, owner, strict=True):
        by_step[index].append(event)
    unowned = len(by_step.get(-1, ()))
    if has_gpu and unowned:
        notes.append(f"{unowned} GPU events ran outside the profiled steps (not counted)")
    gpu_sets = _gpu_sets(trace.gpu) if has_gpu else None
    origin = trace.steps[0].start if trace.steps else 0.0
    optimizer_names: set[str] = set()
    # Host time inside launch calls, as one set (calls on several threads may overlap).
    launch_spans = intervals.union(
        (launch.start, launch.end)
        for launch in trace.launches.values()
        if LAUNCH_NAMES.match(launch.name)
    )
    steps = tuple(
        _step(trace, i, origin, gpu_sets, by_step.get(i, []), optimizer_names, launch_spans)
        for i in range(len(trace.steps))
    )
    fused = None
    if optimizer_names:
        fused = any(_FUSED.search(name) for name in optimizer_names)
    owned = [e for i, events in by_step.items() if i >= 0 for e in events]
    table, categories, precision = _kernels(owned)
    mfu = _mfu(trace, steps, precision, flops_per_step, flops_source)
    return RankProfile(
        path=trace.path,
        rank=trace.rank,
        device=trace.device_name,
        vendor=trace.vendor,
        steps=steps,
        kernels=table,
        categories=categories,
        hta=hta.split(trace) if has_gpu else None,
        mfu=mfu,
        gemm_precision=precision,
        optimizer_fused=fused,
        optimizers=dict(optimizers or {}),
        loader=_loader(trace),
        cpus_per_rank=cpus_per_rank,
        device_activity=_device_activity(trace, readings, device_uuid),
        notes=tuple(notes),
    )


def _device_activity(
    trace: Trace, readings: Sequence[device.Reading], uuid: str | None
) -> device.DeviceActivity | None:
    """The GPU's own counters over the profiled steps (live runs on a GPU machine)."""
    if not readings or not trace.steps or trace.base_unix_us is None:
        return None
    devices = [e.device for e in trace.gpu if e.kind == "kernel"]
    index = max(set(devices), key=devices.count) if devices else 0
    start = (trace.base_unix_us + trace.steps[0].start) / 1e6
    end = (trace.base_unix_us + max(s.end for s in trace.steps)) / 1e6
    return device.activity(readings, index, start, end, uuid)


def _loader(trace: Trace) -> str | None:
    """Where the DataLoader loads batches, from its iterator's class in the trace."""
    names = {h.name for h in trace.host if h.name.startswith(DATALOADER_PREFIX)}
    if any("SingleProcess" in n for n in names):
        return "main process"
    if any("MultiProcessing" in n for n in names):
        return "worker processes"
    return None


def _gpu_sets(events: Sequence[GpuEvent]) -> dict[str, list[Span]]:
    compute: list[Span] = []
    comm: list[Span] = []
    memory: list[Span] = []
    h2d: list[Span] = []
    for event in events:
        label = kernels.category(event.name, event.kind)
        span = (event.start, event.end)
        if label in kernels.COMMUNICATION:
            comm.append(span)
        elif label in kernels.MEMORY:
            memory.append(span)
            if "htod" in event.name.lower():
                h2d.append(span)
        else:
            compute.append(span)
    return {
        "compute": intervals.union(compute),
        "communication": intervals.union(comm),
        "memory": intervals.union(memory),
        "h2d": intervals.union(h2d),
    }


def _host_union(
    events: Sequence[HostEvent], window: Span, prefix: str | tuple[str, ...]
) -> list[Span]:
    spans = [(e.start, e.end) for e in events if e.name.startswith(prefix)]
    return intervals.clip(intervals.union(spans), window)


def _step(
    trace: Trace,
    index: int,
    origin: float,
    gpu_sets: dict[str, list[Span]] | None,
    events: list[GpuEvent],
    optimizer_names: set[str],
    launch_spans: list[Span],
) -> StepProfile:
    step = trace.steps[index]
    window = (step.start, step.end)
    wall = step.end - step.start
    inside = [h for h in trace.host if h.start < step.end and h.end > step.start]
    data = _host_union(inside, window, DATALOADER_PREFIX)
    optimizer = _host_union(inside, window, OPTIMIZER_PREFIXES)
    backward_events = [h for h in inside if h.name.startswith(BACKWARD_PREFIX)]
    data_ms = intervals.length(data)
    optimizer = intervals.subtract(optimizer, data)
    optimizer_ms = intervals.length(optimizer)
    if backward_events:
        b_start = max(step.start, min(h.start for h in backward_events))
        b_end = min(step.end, max(h.end for h in backward_events))
        backward = intervals.subtract(intervals.subtract([(b_start, b_end)], data), optimizer)
        before = [end for _, end in data if end <= b_start]
        f_start = max(before) if before else step.start
        forward = intervals.subtract(intervals.subtract([(f_start, b_start)], data), optimizer)
    else:
        backward = []
        forward = intervals.subtract(intervals.subtract([window], data), optimizer)
    forward_ms = intervals.length(forward)
    backward_ms = intervals.length(backward)
    other = max(0.0, wall - data_ms - optimizer_ms - forward_ms - backward_ms)
    phases = {"data_wait": data, "forward": forward, "backward": backward, "optimizer": optimizer}
    host = dict(
        zip(
            HOST_PHASES,
            (v / US_PER_MS for v in (data_ms, forward_ms, backward_ms, optimizer_ms, other)),
            strict=True,
        )
    )
    launch_us = intervals.length(intervals.clip(launch_spans, window))
    flops = sum(h.flops for h in inside if h.flops and step.start <= h.start < step.end)
    gpu = None
    comm_ms = h2d_ms = 0.0
    if gpu_sets is not None:
        compute = intervals.clip(gpu_sets["compute"], window)
        comm = intervals.clip(gpu_sets["communication"], window)
        memory = intervals.clip(gpu_sets["memory"], window)
        exposed = intervals.subtract(comm, compute)
        busy_compute_comm = intervals.union([*compute, *comm])
        copies = intervals.subtract(memory, busy_compute_comm)
        busy = intervals.union([*busy_compute_comm, *memory])
        idle = intervals.subtract([window], busy)
        idle_data = intervals.intersect(idle, data)
        gpu = {
            "compute": intervals.length(compute) / US_PER_MS,
            "communication_exposed": intervals.length(exposed) / US_PER_MS,
            "memcpy": intervals.length(copies) / US_PER_MS,
            "idle_data_wait": intervals.length(idle_data) / US_PER_MS,
            "idle_host": (intervals.length(idle) - intervals.length(idle_data)) / US_PER_MS,
        }
        comm_ms = intervals.length(comm) / US_PER_MS
        h2d_ms = intervals.length(intervals.clip(gpu_sets["h2d"], window)) / US_PER_MS
    launched = dict.fromkeys(HOST_PHASES, 0.0)
    for event in events:
        launch = trace.launches.get(event.correlation) if event.correlation >= 0 else None
        when = launch.start if launch is not None else event.start
        launched[_phase_at(phases, when)] += (event.end - event.start) / US_PER_MS
        if _phase_at(phases, when) == "optimizer" and event.kind == "kernel":
            optimizer_names.add(event.name)
    return StepProfile(
        name=step.name,
        start_ms=(step.start - origin) / US_PER_MS,
        step_ms=wall / US_PER_MS,
        host=host,
        launch_ms=launch_us / US_PER_MS,
        gpu=gpu,
        communication_ms=comm_ms,
        h2d_ms=h2d_ms,
        kernels=sum(1 for e in events if e.kind == "kernel"),
        flops=flops,
        launched_in=launched,
    )


def _phase_at(phases: dict[str, list[Span]], when: float) -> str:
    for name, spans in phases.items():
        for start, end in spans:
            if start <= when < end:
                return name
    return "other"


def _kernels(
    events: Sequence[GpuEvent],
) -> tuple[tuple[KernelRow, ...], dict[str, float], dict[str, float]]:
    """The top kernels by total time, time per category and the GEMMs' precisions (shares)."""
    totals: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    labels: dict[str, str] = {}
    for event in events:
        totals[event.name] += event.end - event.start
        counts[event.name] += 1
        if event.name not in labels:
            labels[event.name] = kernels.category(event.name, event.kind)
    all_time = sum(totals.values()) or 1.0
    rows = sorted(totals, key=lambda n: -totals[n])[:TOP_KERNELS]
    table = tuple(
        KernelRow(n, labels[n], counts[n], totals[n] / US_PER_MS, totals[n] / all_time)
        for n in rows
    )
    categories: dict[str, float] = dict.fromkeys(kernels.CATEGORIES, 0.0)
    precision: dict[str, float] = defaultdict(float)
    for name, total in totals.items():
        categories[labels[name]] += total / US_PER_MS
        if labels[name] == "gemm":
            precision[kernels.gemm_precision(name) or "unknown"] += total
    gemm_total = sum(precision.values()) or 1.0
    return (
        table,
        {k: v for k, v in categories.items() if v > 0},
        {k: v / gemm_total for k, v in sorted(precision.items(), key=lambda kv: -kv[1])},
    )


def _mfu(
    trace: Trace,
    steps: Sequence[StepProfile],
    precision: dict[str, float],
    flops_per_step: float | None,
    flops_source: str | None,
) -> Mfu:
    if flops_per_step is None:
        counted = [s.flops for s in steps if s.flops > 0]
        if counted:
            flops_per_step = sum(counted) / len(counted)
            flops_source = "profiler with_flops"
    step_ms = sum(s.step_ms for s in steps) / len(steps) if steps else 0.0
    if not flops_per_step or step_ms <= 0:
        return Mfu(None, None, None, None, None, None, None, "no FLOP count in the trace")
    achieved = flops_per_step / (step_ms / 1000.0) / 1e12
    dtype = _dominant_precision(precision)
    spec_id = peak = None
    note = None
    if trace.device_name:
        try:
            spec = gpus.lookup(trace.device_name, option="device").spec
        except InputError:
            spec = None
            note = f"{trace.device_name!r} is not in the GPU catalogue: no peak to divide by"
        if spec is not None:
            spec_id = spec.id
            peak = spec.peak_tflops(dtype) or spec.peak_tflops("fp32")
    else:
        note = "no GPU in the trace (a CPU run): MFU needs a GPU's peak"
    value = achieved / peak if peak else None
    return Mfu(flops_per_step, flops_source, achieved, peak, dtype, spec_id, value, note)


def _dominant_precision(precision: dict[str, float]) -> str:
    known = {k: v for k, v in precision.items() if k != "unknown"}
    if not known:
        return "bf16" if precision else "fp32"
    return max(known, key=lambda k: known[k])

"""Holistic Trace Analysis's figures, computed HTA's way, so dlrig's can be set beside them
(`benchmarks/profile_hta_agreement.py`): its temporal breakdown and its kernel table.
dlrig's own per-step split (analysis.py) is defined differently, per step's wall time."""

from __future__ import annotations

from collections import defaultdict

from dlrig.profile import intervals, kernels
from dlrig.profile.events import STEP_NAME, US_PER_MS, GpuEvent, Trace
from dlrig.profile.model import HtaSplit


def split(trace: Trace) -> HtaSplit | None:
    """Holistic Trace Analysis's temporal breakdown, computed the way HTA 0.5 computes it
    (hta/analyzers/breakdown_analysis.py `get_temporal_breakdown`, hta/common/trace.py's
    step filter), so the two can be set side by side:

    - events: every event with a stream (kernels, copies, sets, and host events that carry
      one); with two or more distinct ProfilerStep numbers only those launched before the
      last step's start (the last step is dropped, the first kept);
    - kernel time: the span from the first event's start to the last one's end;
    - idle: that span less the union of all events; compute: the union of kernels that are
      neither NCCL (`^nccl.*Kernel`) nor memory (`^Memcpy|^Memset|^dma`) nor syncs;
      non-compute: the rest of the union. Percentages are of the span.

    HTA rounds fractional timestamps to whole µs first (start up, end down); dlrig does not,
    which moves the figures by up to ~3 points on traces of sub-µs kernels (benchmarks/
    profile_hta_agreement.py measures it both ways)."""
    chosen, kept = events(trace)
    if not chosen:
        return None
    everything = intervals.union((e.start, e.end) for e in chosen)
    compute = intervals.union(
        (e.start, e.end) for e in chosen if kernels.hta_type(e.name, e.kind) == "COMPUTATION"
    )
    span = everything[-1][1] - everything[0][0]
    if span <= 0:
        return None
    busy = intervals.length(everything)
    compute_us = intervals.length(compute)
    return HtaSplit(
        span_ms=span / US_PER_MS,
        idle_pct=100.0 * (span - busy) / span,
        compute_pct=100.0 * compute_us / span,
        non_compute_pct=100.0 * (busy - compute_us) / span,
        iterations=tuple(kept),
    )


def events(trace: Trace) -> tuple[list[GpuEvent], list[int]]:
    """The GPU events HTA's breakdowns use, and the step numbers they come from (see
    `split`)."""
    events = [*trace.gpu, *trace.stream_extras]
    kept = sorted({n for n in (_step_number(s.name) for s in trace.steps) if n >= 0})
    if len(kept) < 2:
        return [e for e in events if e.stream >= 0], kept
    last = max([*(s.start for s in trace.steps), *trace.gpu_step_starts])
    chosen = []
    for event in events:
        launch = trace.launches.get(event.correlation) if event.correlation >= 0 else None
        if launch is not None and launch.start < last:
            chosen.append(event)
    return chosen, kept[:-1]


def kernel_totals(trace: Trace) -> dict[str, float]:
    """Total µs per kernel name over HTA's event set: its kernel breakdown's table, for
    comparing the two (dlrig's own table covers every profiled step)."""
    totals: dict[str, float] = defaultdict(float)
    for event in events(trace)[0]:
        totals[event.name] += event.end - event.start
    return dict(totals)


def _step_number(name: str) -> int:
    match = STEP_NAME.match(name)
    return int(match.group(1)) if match else -1

"""Peak GPU memory per GPU, as nvidia-smi would show it, from traced live-memory curves.

The trace gives, for every event of one step, the live bytes of activations, backward
temporaries, autocast weight copies, gradients and optimizer temporaries. A strategy
(fit/sharding.py) scales some of them and adds what sits outside the timeline (parameters,
optimizer state, buckets, gathered units). For each phase the peak of the dynamic part is taken
with its components; traces of 2 and 3 layer periods are extrapolated to the full depth phase by
phase, then the fixed parts of the full model are added. Fragmentation applies to the dynamic
part only: long-lived state is allocated once, in whole blocks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dlrig.fit.sharding import Held

if TYPE_CHECKING:
    from dlrig.fit.tracedata import Trace

PHASES = ("forward", "backward", "optimizer")


@dataclass(frozen=True)
class PhasePeak:
    activations: float  # activations + backward temporaries
    weight_copies: float
    gradients: float
    optimizer_temporaries: float

    @property
    def total(self) -> float:
        return self.activations + self.weight_copies + self.gradients + self.optimizer_temporaries


@dataclass(frozen=True)
class MemoryEstimate:
    peak_bytes: int  # what nvidia-smi shows at the peak
    reserved_bytes: int  # torch.cuda.max_memory_reserved()
    allocated_bytes: int  # torch.cuda.max_memory_allocated()
    breakdown: dict[str, int]
    peak_phase: str
    activation_peak_bytes: int  # the highest activation memory of the step (any strategy)
    host_bytes_per_gpu: int
    pageable_bytes: int = 0  # paged optimizer state: in the peak, may page out to the host
    # activation offloading: the saved activations of the layers not kept on the GPU, which go
    # to host memory in forward and come back in backward (per micro-batch)
    offloaded_activation_bytes: int = 0

    @property
    def needed_bytes(self) -> int:
        """What must be resident on the GPU: the peak less state that can page out."""
        return self.peak_bytes - self.pageable_bytes


@dataclass(frozen=True)
class PhaseMoments:
    """One phase of one traced depth: the components at its highest moment, and at the two
    moments that bound it (the most activations held, the most gradients and optimizer
    temporaries held), which are the same moments at every depth."""

    peak: PhasePeak
    most_activations: PhasePeak
    most_gradients: PhasePeak

    @property
    def activation_side(self) -> bool:
        return self.peak.activations >= self.peak.gradients + self.peak.optimizer_temporaries


def phase_peaks(trace: Trace, held: Held, grads_kept: bool) -> dict[str, PhaseMoments]:
    """Per phase, the dynamic components at the moment their scaled sum is highest (and at the
    two bounding moments, see PhaseMoments)."""
    curves = trace.curves
    activations = (curves["activation"] + curves["backward_temp"]) * held.activation_scale
    copies = curves["weight_copy"] * held.copy_scale
    grads = curves["gradient"] * held.gradient_scale
    if grads_kept:  # kept across micro-batches, or between steps (zero_grad(set_to_none=False))
        grads = np.full_like(grads, float(curves["gradient"].max()) * held.gradient_scale)
    if held.frozen_gradients:
        # FSDP1 mixed units: the frozen weights' gradients fill in as the trainable ones do
        # (unit by unit through backward), or are there throughout when kept
        top = float(curves["gradient"].max())
        share = curves["gradient"] / top if top > 0 and not grads_kept else 1.0
        grads = grads + share * held.frozen_gradients
    temps = curves["optimizer_temp"] * held.optimizer_temp_scale
    total = activations + copies + grads + temps

    def at(index: int) -> PhasePeak:
        return PhasePeak(
            float(activations[index]),
            float(copies[index]),
            float(grads[index]),
            float(temps[index]),
        )

    peaks: dict[str, PhaseMoments] = {}
    for phase in PHASES:
        start, end = trace.phase_spans.get(phase, (0, 0))
        if end <= start:
            continue
        window = slice(start, min(end + 1, len(total)))
        peaks[phase] = PhaseMoments(
            at(start + int(np.argmax(total[window]))),
            at(start + int(np.argmax((activations + copies)[window]))),
            at(start + int(np.argmax((grads + temps)[window]))),
        )
    return peaks


def _extrapolated(
    moments: Sequence[PhasePeak], depths: Sequence[int], depth: int, activation_depth: int
) -> PhasePeak:
    return PhasePeak(
        *(
            extrapolate(
                [getattr(p, part) for p in moments],
                depths,
                activation_depth if part == "activations" else depth,
            )
            for part in ("activations", "weight_copies", "gradients", "optimizer_temporaries")
        )
    )


def phase_peak(
    per_sample: Sequence[PhaseMoments],
    depths: Sequence[int],
    depth: int,
    activation_depth: int | None = None,
) -> PhasePeak:
    """A phase's peak at the full depth. Where the highest moment is of one kind at every traced
    depth (activations held, or gradients held), its components extend affinely. Where it is
    of one kind at 2 layers and the other at 3 (a backward pass whose peak moves from its
    start to its end as layers are added), extending the two moments' parts would mix them (a
    2-layer start with a 3-layer end: 95 GiB of gradients for an 8B model over 2 GPUs); then
    each bounding moment is extended on its own and the higher one taken."""
    kept = depth if activation_depth is None else min(depth, activation_depth)
    if len({m.activation_side for m in per_sample}) == 1:
        return _extrapolated([m.peak for m in per_sample], depths, depth, kept)
    candidates = (
        _extrapolated([m.most_activations for m in per_sample], depths, depth, kept),
        _extrapolated([m.most_gradients for m in per_sample], depths, depth, kept),
    )
    return max(candidates, key=lambda p: p.total)


def extrapolate(values: Sequence[float], depths: Sequence[int], depth: int) -> float:
    """The affine extension of values measured at `depths` to `depth` (one value: as is)."""
    if len(values) == 1:
        return float(values[0])
    (v1, v2), (d1, d2) = values[:2], depths[:2]
    return max(0.0, v1 + (v2 - v1) * (depth - d1) / (d2 - d1))


def combine(
    samples: Sequence[tuple[int, Trace]],
    depth: int,
    held: Held,
    grads_kept: bool,
    workspaces: int,
    context: int,
    nccl: int,
    fragmentation: float,
    activation_depth: int | None = None,
) -> MemoryEstimate:
    """`activation_depth`: with activation offloading, the layers whose saved activations stay
    on the GPU (the traced depth nearest it: the layer in flight and the next); the others' are
    in host memory."""
    per_sample = [phase_peaks(trace, held, grads_kept) for _, trace in samples]
    depths = [d for d, _ in samples]
    kept = depth if activation_depth is None else min(depth, activation_depth)
    best: tuple[float, str, PhasePeak, float, float] | None = None
    for phase in PHASES:
        if not all(phase in peaks for peaks in per_sample):
            continue
        peak = phase_peak([p[phase] for p in per_sample], depths, depth, kept)
        # gathered units exist only while forward/backward compute; FSDP's unit gradients
        # only until their reduce-scatter
        gathered = held.gathered if phase != "optimizer" else 0.0
        buffers = held.buffers if phase != "optimizer" or held.buffers_in_optimizer else 0.0
        if phase == "backward" and held.live_gradient:
            peak = dataclasses.replace(peak, gradients=peak.gradients + held.live_gradient)
        total = peak.total + gathered + buffers
        if best is None or total > best[0]:
            best = (total, phase, peak, gathered, buffers)
    assert best is not None, "a trace has at least a forward phase"
    _, phase, peak, gathered, buffers = best
    fixed = held.parameters + held.optimizer_state + buffers + gathered
    activation_values = [
        float((t.curves["activation"] + t.curves["backward_temp"]).max()) * held.activation_scale
        for _, t in samples
    ]
    activation_peak = extrapolate(activation_values, depths, kept)
    offloaded = max(0.0, extrapolate(activation_values, depths, depth) - activation_peak)
    dynamic = peak.total + gathered + buffers
    allocated = fixed + peak.total
    reserve = (fragmentation - 1.0) * dynamic
    reserved = allocated + reserve + workspaces
    breakdown = {
        "parameters": int(held.parameters),
        "gradients": int(peak.gradients),
        "optimizer_state": int(held.optimizer_state),
        "activations": int(peak.activations),
        "autocast_weight_copies": int(peak.weight_copies),
        "gathered_parameters": int(gathered),
        "optimizer_temporaries": int(peak.optimizer_temporaries),
        "communication_buffers": int(buffers),
        "allocator_reserve": int(reserve),
        "workspaces": int(workspaces),
        "cuda_context": int(context),
        "nccl_buffers": int(nccl),
    }
    return MemoryEstimate(
        peak_bytes=int(reserved + context + nccl),
        reserved_bytes=int(reserved),
        allocated_bytes=int(allocated),
        breakdown=breakdown,
        peak_phase=phase,
        activation_peak_bytes=int(activation_peak),
        host_bytes_per_gpu=int(held.host_bytes_per_gpu + offloaded),
        pageable_bytes=int(held.pageable),
        offloaded_activation_bytes=int(offloaded),
    )

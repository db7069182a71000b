"""The largest batch that fits, and a global batch met exactly (or the nearest one, and why)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from dlrig.fit.context import memory_at

if TYPE_CHECKING:
    from dlrig.fit.context import Context
    from dlrig.fit.tracing import TracedWorkload


def max_batch(traced: TracedWorkload, ctx: Context, limit: int) -> int:
    """Largest per-GPU batch whose peak fits: memory is affine in the batch, so two batches give
    the line and a trace at the answer checks it (and the next batch up must not fit)."""
    b1 = traced.batch
    first = memory_at(traced, ctx, b1)
    b2 = b1 * 2
    second = memory_at(traced, ctx, b2)
    m1, m2 = first.needed_bytes, second.needed_bytes
    # Where the peak sits in the optimizer step (small activations: a sharded or model-parallel
    # GPU's share), it does not move between two small batches; the activations still grow, and
    # they take the peak over as the batch does: the larger slope keeps the guess finite.
    grown = (second.activation_peak_bytes - first.activation_peak_bytes) / (b2 - b1)
    slope = max(1.0, (m2 - m1) / (b2 - b1), grown)
    intercept = m1 - slope * b1
    guess = max(0, int((limit - intercept) // slope))
    for _ in range(6):
        if guess < 1:
            return 0
        peak = memory_at(traced, ctx, guess).needed_bytes
        if peak > limit:
            guess = max(0, min(guess - 1, int(guess * limit / peak)))
            continue
        line = intercept + slope * guess
        # where the line holds, it says whether one more sample would still fit
        if abs(peak - line) <= 0.01 * peak and intercept + slope * (guess + 1) > limit:
            return guess
        above = memory_at(traced, ctx, guess + 1).needed_bytes
        if above <= limit:
            guess += max(1, int((limit - above) // slope))
            continue
        return guess
    return guess


def global_batch(target: int, max_micro: int, gpus: int) -> dict[str, Any]:
    """micro-batch × accumulation × GPUs = target exactly when the GPUs divide it; otherwise the
    nearest multiple of the GPU count, with the reason."""
    max_micro = max(1, max_micro)
    reason = ""
    achieved = target
    if target % gpus:
        below = target - target % gpus
        above = below + gpus
        achieved = below if below and target - below <= above - target else above
        reason = (
            f"{target} is not a multiple of {gpus} GPUs: the nearest achievable global batch is "
            f"{achieved} ({'' if achieved < target else '+'}{achieved - target})"
        )
    per_gpu = achieved // gpus
    # the largest micro-batch that fits and divides the per-GPU share: fewest accumulation steps
    micro = max(d for d in range(1, min(per_gpu, max_micro) + 1) if per_gpu % d == 0)
    accum = per_gpu // micro
    if micro < max_micro and micro * 2 <= min(per_gpu, max_micro) and not reason:
        reason = (
            f"{per_gpu} per GPU has no divisor between {micro} and {min(per_gpu, max_micro)}: "
            f"micro-batch {micro} × {accum} steps meets it exactly"
        )
    return {
        "target": target,
        "global_batch": micro * accum * gpus,
        "micro_batch_per_gpu": micro,
        "grad_accum": accum,
        "gpus": gpus,
        "exact": micro * accum * gpus == target,
        "reason": reason,
        "accumulation_steps": math.ceil(per_gpu / micro),
    }

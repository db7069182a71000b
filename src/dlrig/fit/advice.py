"""What would make a run fit: each remedy evaluated, with its peak per GPU, then the natural
combinations when no single change is enough.

Remedies that keep the trace (another strategy, more GPUs, 8-bit Adam, a larger GPU) cost
numpy only; those that change it (checkpointing, QLoRA) trace once more each (cached), and a
combination reuses those traces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlrig.fit.options import WORKLOAD_FIELDS, replace_options
from dlrig.fit.result import Advice
from dlrig.knowledge.gpus import catalogue

if TYPE_CHECKING:
    from dlrig.fit.memory import MemoryEstimate
    from dlrig.fit.pipeline import Context
    from dlrig.fit.tracing import TracedWorkload

GPU_COUNTS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
QLORA_RANK = 16


def _peak(traced: TracedWorkload, ctx: Context, changes: dict[str, Any]) -> int | None:
    """Peak per GPU with `changes` (a new trace when they touch the workload)."""
    from dlrig.fit.pipeline import Context, memory_at
    from dlrig.fit.tracing import trace

    workload = {k: v for k, v in changes.items() if k in WORKLOAD_FIELDS and k != "optimizer"}
    if workload:
        try:
            traced = trace(replace_options(traced.options, **workload))
        except Exception:  # noqa: BLE001 - a remedy that cannot be traced is not offered
            return None
        if traced.method != "trace":
            return None
    options = replace_options(ctx.options, **changes)
    evaluated = Context(
        options, ctx.spec, ctx.memory_bytes, ctx.gpu_origin, ctx.precision, ctx.precision_why
    )
    return memory_at(traced, evaluated, traced.batch).peak_bytes


def _flags(changes: dict[str, Any]) -> str:
    words = []
    for name, value in changes.items():
        if name == "grad_checkpointing":
            words.append("--grad-checkpointing")
        elif name == "gpus":
            words.append(f"--gpus {value}")
        else:
            words.append(f"--{name.replace('_', '-')} {value}")
    return " ".join(words)


def _singles(traced: TracedWorkload, ctx: Context) -> list[dict[str, Any]]:
    o = ctx.options
    out: list[dict[str, Any]] = []
    if o.gpus > 1 and o.strategy in ("ddp", "zero1", "zero2"):
        out.append({"strategy": "fsdp"})
    if o.optimizer in ("adam", "adamw"):
        out.append({"optimizer": "adamw-8bit"})
    if o.grad_checkpointing == "none" and traced.workload.task != "custom":
        out.append({"grad_checkpointing": "full"})
    if not (o.lora or o.qlora) and traced.workload.task == "causal_lm":
        out.append({"qlora": QLORA_RANK})
    return out


def _more_gpus(
    traced: TracedWorkload, ctx: Context, base: dict[str, Any]
) -> tuple[dict[str, Any], int] | None:
    """The fewest GPUs (sharded) that fit with `base`, or the largest count tried."""
    o = ctx.options
    sharded = o.strategy if o.strategy not in ("ddp", "zero1", "zero2") else "fsdp"
    found: tuple[dict[str, Any], int] | None = None
    for count in GPU_COUNTS:
        if count <= o.gpus:
            continue
        changes = {**base, "gpus": count, "strategy": sharded}
        peak = _peak(traced, ctx, changes)
        if peak is None:
            return None
        found = (changes, peak)
        if peak <= ctx.memory_bytes:
            break
    return found


def advise(traced: TracedWorkload, ctx: Context, memory: MemoryEstimate) -> tuple[Advice, ...]:
    limit = ctx.memory_bytes
    out: list[Advice] = []

    def add(changes: dict[str, Any], peak: int | None, note: str = "", room: int = limit) -> None:
        if peak is not None:
            out.append(Advice(_flags(changes), changes, peak, peak <= room, note))

    singles = _singles(traced, ctx)
    for changes in singles:
        add(changes, _peak(traced, ctx, changes))
    scaled = _more_gpus(traced, ctx, {})
    if scaled is not None and scaled[1] <= limit:
        # Sharding over more GPUs is offered only where it fits: FSDP does not shard the
        # activations, and "--gpus 1024 still over" is no advice.
        add(*scaled)
    if memory.peak_bytes > limit:
        already = [a.options for a in out if a.fits]  # a remedy that fits alone needs no more
        out.extend(_shorter_sequences(traced, ctx, [c for c in singles if c not in already]))
    if memory.peak_bytes > limit:
        larger = sorted(
            (s for s in catalogue().specs if (s.memory_bytes or 0) >= memory.peak_bytes),
            key=lambda s: (s.memory_bytes or 0, -(s.bf16_tflops or 0)),
        )
        if larger:
            best = larger[0]
            room = best.memory_bytes or 0
            add({"gpu": best.id}, memory.peak_bytes, f"{room / 1024**3:.0f} GiB", room)
    # Pairs are looked for unless a change that keeps the run as it is already fits: a larger
    # or more GPUs cost money, a shorter sequence changes the data.
    if all({"gpu", "gpus", "seq_len"} & set(a.options) for a in out if a.fits):
        out.extend(_combinations(traced, ctx, singles))
    return tuple(out)


def _combinations(
    traced: TracedWorkload, ctx: Context, singles: list[dict[str, Any]]
) -> list[Advice]:
    """Pairs of the single remedies (checkpointing + 8-bit Adam, QLoRA + 8-bit, ...), and
    each with more sharded GPUs, cheapest first: the ones a user would combine."""
    limit = ctx.memory_bytes
    out: list[Advice] = []
    pairs = [
        {**a, **b}
        for i, a in enumerate(singles)
        for b in singles[i + 1 :]
        if not set(a) & set(b) and not ("qlora" in a and "strategy" in b)
    ]
    for changes in pairs:
        peak = _peak(traced, ctx, changes)
        if peak is not None:
            out.append(Advice(_flags(changes), changes, peak, peak <= limit))
    if not any(a.fits for a in out):
        for base in [*singles, *pairs]:
            if "strategy" in base or "qlora" in base:
                continue
            scaled = _more_gpus(traced, ctx, base)
            if scaled is not None and scaled[1] <= limit:
                changes, peak = scaled
                out.append(Advice(_flags(changes), changes, peak, True))
                break
    return out


def _shorter_sequences(
    traced: TracedWorkload, ctx: Context, singles: list[dict[str, Any]]
) -> list[Advice]:
    """The longest halving of --seq-len that fits, as it is and with activation checkpointing:
    with fused attention the activations grow linearly in the sequence length, so a shorter
    one is the first fix most people reach for (it changes the data, so it is the user's call:
    offered, never chosen)."""
    seq = ctx.options.seq_len or getattr(traced.workload, "seq_len", None)
    if not seq or traced.workload.task != "causal_lm":
        return []
    out: list[Advice] = []
    variants: list[dict[str, Any]] = [{}]
    variants += [c for c in singles if set(c) == {"grad_checkpointing"}]
    for base in variants:
        length = seq // 2
        for _ in range(3):  # seq/2, seq/4, seq/8: each a trace
            if length < 128:
                break
            changes = {"seq_len": length, **base}
            peak = _peak(traced, ctx, changes)
            if peak is None:
                break
            if peak <= ctx.memory_bytes:
                out.append(Advice(_flags(changes), changes, peak, True, "shorter sequences"))
                break
            length //= 2
    return out

"""What would make a run fit: each remedy evaluated, with its peak per GPU, then the natural
combinations when no single change is enough.

Remedies that keep the trace (another strategy, more GPUs, 8-bit Adam, a larger GPU) cost
numpy only; those that change it (checkpointing, QLoRA) trace once more each (cached), and a
combination reuses those traces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlrig.errors import DlrigError
from dlrig.fit import hardware, parallel
from dlrig.fit.context import Context, memory_at, sharded_full, storage
from dlrig.fit.options import WORKLOAD_FIELDS, check, replace_options
from dlrig.fit.result import Advice
from dlrig.fit.tracing import trace, traced_precision
from dlrig.knowledge.gpus import catalogue

if TYPE_CHECKING:
    from dlrig.fit.memory import MemoryEstimate
    from dlrig.fit.tracing import TracedWorkload

GPU_COUNTS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
QLORA_RANK = 16
LOSS_CHUNKS = 8  # torchtune's default for CEWithChunkedOutputLoss
LONG_CONTEXT = 32_768  # tokens from which context parallelism is the usual answer (torchtitan)


def _setup(
    traced: TracedWorkload, ctx: Context, changes: dict[str, Any]
) -> tuple[TracedWorkload, Context] | None:
    """The trace and context `dlrig fit` with `changes` would use: None for options it would
    refuse (no remedy); "auto" resolved again for the changed setup (sharding over more GPUs
    makes fp32 masters); a new trace where the workload or that precision changes."""
    options = replace_options(ctx.options, **changes)
    try:
        check(options)
        # a layout the model cannot take (heads, layers, sequence chunks) is no remedy either
        parallel.check_model(
            parallel.mesh_of(options),
            traced.workload.config,
            traced.layers,
            options.seq_len or traced.workload.seq_len,
        )
    except DlrigError:
        return None
    precision, why = ctx.precision, ctx.precision_why
    workload = {k: v for k, v in changes.items() if k in WORKLOAD_FIELDS and k != "optimizer"}
    workload.pop("batch_size", None)  # the trace answers any micro-batch (affine in it)
    if options.precision == "auto":
        natural = traced_precision(options, traced.workload)
        precision, why = hardware.resolve_precision(
            "auto", ctx.spec, natural, sharded_full(options)
        )
        if storage(precision) != storage(traced.precision):
            workload["precision"] = precision
    if workload:
        try:
            traced = trace(replace_options(traced.options, **workload))
        except Exception:  # noqa: BLE001 - a remedy that cannot be traced is not offered
            return None
        if traced.method != "trace":
            return None
    return traced, Context(options, ctx.spec, ctx.memory_bytes, ctx.gpu_origin, precision, why)


def _peak(traced: TracedWorkload, ctx: Context, changes: dict[str, Any]) -> int | None:
    """What must stay on each GPU with `changes`, as `dlrig fit` with them would report it."""
    found = _setup(traced, ctx, changes)
    if found is None:
        return None
    changed, evaluated = found
    batch = changes.get("batch_size", changed.batch)
    return memory_at(changed, evaluated, batch).needed_bytes


def _flags(changes: dict[str, Any]) -> str:
    words = []
    for name, value in changes.items():
        if name == "grad_checkpointing":
            words.append("--grad-checkpointing")
        elif name == "fsdp_mixed_units":
            words.append("without --fsdp-mixed-units")
        elif name == "checkpoint_blocks":
            words.append(f"--checkpoint-blocks {value:g}")
        else:
            words.append(f"--{name.replace('_', '-')} {value}")
    return " ".join(words)


def _singles(traced: TracedWorkload, ctx: Context) -> list[dict[str, Any]]:
    """One-flag remedies, in the order a user reaches for them: what keeps the model and the
    data as they are first (checkpointing, a leaner optimizer step), then QLoRA, then sharding."""
    o = ctx.options
    out: list[dict[str, Any]] = []
    if o.fsdp_mixed_units and (o.lora or o.qlora):
        out.append({"fsdp_mixed_units": False})
    if o.grad_checkpointing == "none" and traced.workload.task != "custom":
        out.append({"grad_checkpointing": "full"})
    if o.grad_checkpointing == "full" and o.checkpoint_blocks != 1.0:
        out.append({"checkpoint_blocks": 1.0})
    if o.optimizer in ("adam", "adamw", "sgd", "sgd-momentum") and o.optimizer_impl != "fused":
        # torch.optim's fused step has no parameter-sized temporaries (the foreach step does)
        out.append({"optimizer_impl": "fused"})
    if _logits_matter(traced, ctx):
        out.append({"loss_chunks": LOSS_CHUNKS})
    if o.optimizer in ("adam", "adamw"):
        out.append({"optimizer": "adamw-8bit"})
        # QLoRA's answer to memory spikes: the state pages to the host instead of failing
        out.append({"optimizer": "paged-adamw-8bit"})
    if not (o.lora or o.qlora) and traced.workload.task == "causal_lm":
        out.append({"qlora": QLORA_RANK})
    if o.gpus > 1 and o.strategy in ("ddp", "zero1", "zero2"):
        out.append({"strategy": "fsdp"})
    # the same GPUs split the activations further: a long sequence over more context-parallel
    # ranks, a model-parallel run over a wider tensor-parallel group (within a node)
    seq = traced.workload.seq_len or 0
    if o.gpus > 1 and (o.cp > 1 or seq >= LONG_CONTEXT):
        out.append({"cp": 2 * o.cp})
    if o.tp > 1 and 2 * o.tp <= o.gpus_per_node:
        out.append({"tp": 2 * o.tp})
    return out


def _logits_matter(traced: TracedWorkload, ctx: Context) -> bool:
    """A causal LM whose fp32 logits and their gradient (what chunked cross-entropy stops
    holding at once) come to a twentieth of the GPU or more: a large vocabulary on long
    sequences (Llama 3's 128,256 tokens at 8k are 4 GiB per sequence)."""
    workload = traced.workload
    if workload.task != "causal_lm" or ctx.options.loss_chunks or not workload.seq_len:
        return False
    vocab = int(getattr(workload.config, "vocab_size", 0) or 0)
    logits = 2 * 4 * vocab * workload.seq_len * max(1, traced.batch)
    return logits * 20 >= ctx.memory_bytes


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
    """What would fit, the obvious fix first: a shorter sequence, a smaller micro-batch with
    accumulation, checkpointing, a leaner optimizer, QLoRA, then more or larger GPUs; pairs of
    those when no change of the run itself fits alone. Only changes that fit are offered:
    "still over" is no advice, and a change that cannot help (sharding does not shrink a
    LoRA's activations) never fits."""
    limit = ctx.memory_bytes
    out: list[Advice] = []

    def add(changes: dict[str, Any], peak: int | None, note: str = "", room: int = limit) -> None:
        if peak is not None and peak <= room:
            out.append(Advice(_flags(changes), changes, peak, True, note))

    singles = _singles(traced, ctx)
    # weights and optimizer state do not shrink with the sequence or the micro-batch: where
    # they alone are over, neither can help (and each shorter sequence is a trace)
    parts = memory.breakdown
    held = parts["parameters"] + parts["optimizer_state"] + parts["cuda_context"]
    if memory.peak_phase == "optimizer":
        # the step's gradients and temporaries do not shrink with the data either: where the
        # optimizer step alone is over, a shorter sequence only moves the activations' peak
        held += parts["gradients"] + parts["optimizer_temporaries"] + parts["nccl_buffers"]
    shrinkable = held - memory.pageable_bytes < limit
    if shrinkable:
        out.extend(_shorter_sequences(traced, ctx, {}))
        out.extend(_smaller_micro_batch(traced, ctx))
    for changes in singles:
        if shrinkable or not ACTIVATIONS_ONLY.issuperset(changes):
            add(changes, _peak(traced, ctx, changes), _note(changes))
    # Pairs are looked for unless one change of the run itself already fits: a shorter
    # sequence changes the data, a smaller micro-batch the speed, more or larger GPUs money.
    if not any(a for a in out if not _CHANGES_THE_SETUP & set(a.options)):
        out.extend(_combinations(traced, ctx, singles, shrinkable))
    scaled = _more_gpus(traced, ctx, {})
    if scaled is not None:
        # Sharding over more GPUs is offered only where it fits: FSDP does not shard the
        # activations, and "--gpus 1024 still over" is no advice.
        add(*scaled)
    larger = sorted(
        (
            s
            for s in catalogue().devices
            if (s.memory_bytes or 0) >= memory.peak_bytes
            and (s.fp8_tflops or not ctx.options.fp8)  # --fp8 is refused on the others
        ),
        key=lambda s: (s.memory_bytes or 0, -(s.bf16_tflops or 0)),
    )
    if larger and memory.peak_bytes > limit:
        best = larger[0]
        room = best.memory_bytes or 0
        add({"gpu": best.id}, memory.peak_bytes, f"{room / 1024**3:.0f} GiB", room)
    return tuple(out)


# Remedies that shrink only the activations: no help alone where what is held is over (each
# would be a trace), though they still pair with those that shrink the rest.
ACTIVATIONS_ONLY = frozenset({"grad_checkpointing", "checkpoint_blocks", "loss_chunks", "cp"})
# Remedies that change the data, the pace or the hardware rather than the run itself.
_CHANGES_THE_SETUP = {"gpu", "gpus", "seq_len", "batch_size"}


def _note(changes: dict[str, Any]) -> str:
    if str(changes.get("optimizer", "")).startswith("paged-"):
        return "its state pages to host RAM as needed"
    if "fsdp_mixed_units" in changes:
        return "adapters in their own FSDP units (peft's fsdp_auto_wrap_policy) or FSDP2"
    if "loss_chunks" in changes:
        return "torchtune's chunked cross-entropy: no whole-sequence fp32 logits"
    return ""


def _combinations(
    traced: TracedWorkload, ctx: Context, singles: list[dict[str, Any]], shrinkable: bool
) -> list[Advice]:
    """Pairs of the single remedies (checkpointing + 8-bit Adam, QLoRA + checkpointing, ...)
    and checkpointing with a shorter sequence; then each with more sharded GPUs. Only the
    pairs that fit, at most three."""
    limit = ctx.memory_bytes
    out: list[Advice] = []
    # the fused step pairs with nothing: 8-bit and paged Adam have no temporaries either, and
    # each pair with it would cost a trace of its own
    paired = [c for c in singles if "optimizer_impl" not in c]
    pairs = [
        {**a, **b}
        for i, a in enumerate(paired)
        for b in paired[i + 1 :]
        if not set(a) & set(b) and not ("qlora" in a and "strategy" in b)
    ]
    for changes in pairs:
        peak = _peak(traced, ctx, changes)
        if peak is not None and peak <= limit:
            out.append(Advice(_flags(changes), changes, peak, True, _note(changes)))
        if len(out) == 3:
            break
    if {"grad_checkpointing": "full"} in singles and shrinkable:
        out.extend(_shorter_sequences(traced, ctx, {"grad_checkpointing": "full"}))
    if not out:
        # the same with a smaller micro-batch: QLoRA and checkpointing at batch 1, say (no
        # new trace: each was traced above and answers any micro-batch)
        for base in [*singles, *pairs]:
            out.extend(_smaller_micro_batch(traced, ctx, base))
            if out:
                break
    if not out:
        for base in [*singles, *pairs]:
            if "strategy" in base or "qlora" in base:
                continue
            scaled = _more_gpus(traced, ctx, base)
            if scaled is not None and scaled[1] <= limit:
                changes, peak = scaled
                out.append(Advice(_flags(changes), changes, peak, True))
                break
    return out


def _smaller_micro_batch(
    traced: TracedWorkload, ctx: Context, base: dict[str, Any] | None = None
) -> list[Advice]:
    """The largest micro-batch dividing the batch that fits (with `base`'s changes too), with
    the accumulation that keeps the global batch (the same samples per optimizer step, a
    little slower)."""
    base = base or {}
    batch = traced.batch
    # micro-batches that divide the batch, so the accumulation keeps it exactly
    for size in sorted((d for d in range(1, batch // 2 + 1) if batch % d == 0), reverse=True):
        accum = ctx.options.grad_accum * (batch // size)
        changes = {**base, "batch_size": size, "grad_accum": accum}
        peak = _peak(traced, ctx, changes)  # None where accumulation is refused
        if peak is not None and peak <= ctx.memory_bytes:
            note = "same global batch" + (f"; {_note(base)}" if _note(base) else "")
            return [Advice(_flags(changes), changes, peak, True, note)]
    return []


def _shorter_sequences(traced: TracedWorkload, ctx: Context, base: dict[str, Any]) -> list[Advice]:
    """The longest halving of --seq-len that fits with `base` ({} or checkpointing): with
    fused attention the activations grow linearly in the sequence length, so a shorter one is
    the first fix most people reach for (it changes the data, so it is the user's call:
    offered, never chosen)."""
    seq = ctx.options.seq_len or getattr(traced.workload, "seq_len", None)
    if not seq or traced.workload.task != "causal_lm":
        return []
    length = seq // 2
    for _ in range(3):  # seq/2, seq/4, seq/8: each a trace
        if length < 128:
            break
        changes = {"seq_len": length, **base}
        peak = _peak(traced, ctx, changes)
        if peak is None:
            break
        if peak <= ctx.memory_bytes:
            return [Advice(_flags(changes), changes, peak, True, "shorter sequences")]
        length //= 2
    return []

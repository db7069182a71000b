"""What would make a run fit: each remedy evaluated, with its peak per GPU.

Remedies that keep the trace (another strategy, more GPUs, 8-bit Adam, a larger GPU) cost
numpy only; those that change it (checkpointing, QLoRA) trace once more each (cached).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlrig.fit.options import replace_options
from dlrig.fit.result import Advice
from dlrig.knowledge.gpus import catalogue

if TYPE_CHECKING:
    from dlrig.fit.memory import MemoryEstimate
    from dlrig.fit.pipeline import Context
    from dlrig.fit.tracing import TracedWorkload

GPU_COUNTS = (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _peak(traced: TracedWorkload, ctx: Context, **changes: Any) -> int:
    from dlrig.fit.pipeline import Context, memory_at

    options = replace_options(ctx.options, **changes)
    return memory_at(
        traced,
        Context(
            options, ctx.spec, ctx.memory_bytes, ctx.gpu_origin, ctx.precision, ctx.precision_why
        ),
        traced.batch,
    ).peak_bytes


def _retraced_peak(traced: TracedWorkload, ctx: Context, **changes: Any) -> int | None:
    from dlrig.fit.pipeline import Context, memory_at
    from dlrig.fit.tracing import trace

    try:
        other = trace(replace_options(traced.options, **changes))
    except Exception:  # noqa: BLE001 - a remedy that cannot be traced is not offered
        return None
    if other.method != "trace":
        return None
    options = replace_options(ctx.options, **changes)
    return memory_at(
        other,
        Context(
            options, ctx.spec, ctx.memory_bytes, ctx.gpu_origin, ctx.precision, ctx.precision_why
        ),
        other.batch,
    ).peak_bytes


def advise(traced: TracedWorkload, ctx: Context, memory: MemoryEstimate) -> tuple[Advice, ...]:
    o = ctx.options
    limit = ctx.memory_bytes
    out: list[Advice] = []

    def add(
        change: str, options: dict[str, Any], peak: int | None, note: str = "", room: int = limit
    ) -> None:
        if peak is not None:
            out.append(Advice(change, options, peak, peak <= room, note))

    if o.gpus > 1 and o.strategy in ("ddp", "zero1", "zero2"):
        add("--strategy fsdp", {"strategy": "fsdp"}, _peak(traced, ctx, strategy="fsdp"))
    sharded = o.strategy if o.strategy not in ("ddp", "zero1", "zero2") else "fsdp"
    for count in GPU_COUNTS:
        if count <= o.gpus:
            continue
        peak = _peak(traced, ctx, gpus=count, strategy=sharded)
        if peak <= limit or count == GPU_COUNTS[-1]:
            add(f"--gpus {count} --strategy {sharded}", {"gpus": count, "strategy": sharded}, peak)
            break
    if o.optimizer in ("adam", "adamw"):
        add(
            "--optimizer adamw-8bit",
            {"optimizer": "adamw-8bit"},
            _peak(traced, ctx, optimizer="adamw-8bit"),
        )
    if o.grad_checkpointing == "none" and traced.workload.task != "custom":
        add(
            "--grad-checkpointing",
            {"grad_checkpointing": "full"},
            _retraced_peak(traced, ctx, grad_checkpointing="full"),
        )
    if not (o.lora or o.qlora) and traced.workload.task == "causal_lm":
        add("--qlora 16", {"qlora": 16}, _retraced_peak(traced, ctx, qlora=16))
    if memory.peak_bytes > limit:
        larger = sorted(
            (s for s in catalogue().specs if (s.memory_bytes or 0) >= memory.peak_bytes),
            key=lambda s: (s.memory_bytes or 0, -(s.bf16_tflops or 0)),
        )
        if larger:
            best = larger[0]
            room = best.memory_bytes or 0
            add(
                f"--gpu {best.id}",
                {"gpu": best.id},
                memory.peak_bytes,
                f"{room / 1024**3:.0f} GiB",
                room,
            )
    return tuple(out)

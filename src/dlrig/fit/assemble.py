"""Stage 4-5: memory and time of a traced workload on one GPU setup, assembled into a FitResult."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from dlrig.fit import batching
from dlrig.fit.advice import advise
from dlrig.fit.assumptions import assumptions
from dlrig.fit.context import memory_at, time_at
from dlrig.fit.parallel import mesh_of
from dlrig.fit.result import FitResult
from dlrig.fit.timing import host_link_bytes_per_s, peak_used_tflops
from dlrig.units import human_bytes

if TYPE_CHECKING:
    from dlrig.fit.context import Context
    from dlrig.fit.tracing import TracedWorkload


def setup_dict(traced: TracedWorkload, ctx: Context, batch: int) -> dict[str, Any]:
    o = ctx.options
    return {
        "batch_size": batch,
        "seq_len": traced.workload.seq_len,
        "image_size": traced.workload.image_size,
        "precision": ctx.precision,
        "optimizer": o.optimizer,
        "grad_checkpointing": o.grad_checkpointing,
        # the fraction of the blocks "full" checkpoints; None when checkpointing is not full
        "checkpoint_blocks": o.checkpointed_fraction or None,
        "grad_accum": o.grad_accum,
        "gpus": o.gpus,
        "gpus_per_node": o.gpus_per_node,
        "strategy": o.strategy,
        "gpu": ctx.spec.id,
        "interconnect": o.interconnect or ("nvlink" if ctx.spec.has_nvlink else "pcie"),
        "lora_rank": o.lora,
        "qlora_rank": o.qlora,
        "offload": o.offload,
        "compile": o.compile,
        "fp8": o.fp8,
        "loss_chunks": o.loss_chunks,
        "tp": o.tp,
        "pp": o.pp,
        "cp": o.cp,
        "pp_schedule": o.pp_schedule,
    }


def result(traced: TracedWorkload, ctx: Context) -> FitResult:
    o = ctx.options
    batch = traced.batch
    memory = memory_at(traced, ctx, batch)
    notes = list(traced.notes)
    max_batch = None
    if o.search_max_batch:
        try:
            max_batch = batching.max_batch(traced, ctx, ctx.memory_bytes)
        except Exception as exc:  # noqa: BLE001 - a batch that cannot be traced ends the search
            notes.append(f"largest-batch search stopped: {type(exc).__name__}: {exc}")
    phases, timing = time_at(traced, ctx, batch)
    paged_out = max(0, min(memory.pageable_bytes, memory.peak_bytes - ctx.memory_bytes))
    if paged_out:
        # paged state goes out to host RAM and comes back for the optimizer step, every step,
        # over the GPU's host link, at the rate CPU offload is timed at
        paging = 2 * paged_out / host_link_bytes_per_s(ctx.spec)
        timing = dataclasses.replace(
            timing, offload_s=timing.offload_s + paging, step_s=timing.step_s + paging
        )
        notes.append(
            f"{human_bytes(paged_out)} of paged optimizer state crosses PCIe twice a step: "
            f"+{paging:.2f} s"
        )
    mesh = mesh_of(o)
    replicas = mesh.dp  # tp, pp and cp ranks share their replica's samples
    if mesh.pp > o.grad_accum:
        notes.append(
            f"{o.grad_accum} micro-batch(es) a step through {mesh.pp} pipeline stages: each "
            f"stage idles {(mesh.bubble - 1) / mesh.bubble:.0%} of the step; "
            f"--grad-accum {mesh.pp} or more keeps them busy"
        )
    samples_per_step = batch * replicas * o.grad_accum
    samples_per_s = samples_per_step / timing.step_s if timing.step_s > 0 else None
    tokens_per_sample = traced.workload.tokens_per_sample
    tokens_per_s = (
        samples_per_s * tokens_per_sample if samples_per_s and tokens_per_sample else None
    )
    scaling = timing.ideal_step_s / timing.step_s if o.gpus > 1 and timing.step_s > 0 else None
    time_to_train = None
    if o.tokens and tokens_per_s:
        time_to_train = o.tokens / tokens_per_s
    elif o.dataset_size and samples_per_s:
        time_to_train = o.dataset_size * o.epochs / samples_per_s
    # model FLOPs: 3× forward for full training, what backward really does when weights are
    # frozen (LoRA); never more than the traced work, so MFU stays ≤ 100%
    model_flops = min(3 * phases.forward_flops, phases.forward_flops + phases.backward_flops)
    peak = peak_used_tflops(traced.at(batch)[-1][1], ctx.spec, ctx.precision, ctx.options.fp8)
    mfu = model_flops * o.grad_accum / timing.step_s / (peak * 1e12) if timing.step_s else None
    assert mfu is None or mfu <= 1.0 + 1e-9, "roofline times never beat the peak"
    global_plan = (
        batching.global_batch(o.global_batch, max_batch or batch, replicas)
        if o.global_batch
        else None
    )
    fits = memory.needed_bytes <= ctx.memory_bytes
    advice: tuple[Any, ...] = ()
    if o.advise and (not fits or max_batch == 0):
        advice = advise(traced, ctx, memory)
    nodes_gpus = min(o.gpus, o.gpus_per_node)
    return FitResult(
        model=traced.workload.name,
        method="trace",
        gpu=ctx.spec.id,
        gpu_memory_bytes=ctx.memory_bytes,
        params=traced.sizes.param_count,
        trainable_params=traced.sizes.trainable_count,
        batch_size=batch,
        seq_len=traced.workload.seq_len,
        image_size=traced.workload.image_size,
        memory_peak_bytes=memory.peak_bytes,
        memory_reserved_bytes=memory.reserved_bytes,
        memory_breakdown=memory.breakdown,
        peak_phase=memory.peak_phase,
        fits=fits,
        # paged state moves out only when the GPU runs short: the margin is the peak's when
        # the whole peak fits, else what stays resident
        margin_bytes=ctx.memory_bytes
        - (memory.peak_bytes if memory.peak_bytes <= ctx.memory_bytes else memory.needed_bytes),
        max_batch_size=max_batch,
        global_batch=global_plan,
        flops_per_step=(phases.forward_flops + phases.backward_flops) * o.grad_accum,
        step_time_s=timing.step_s,
        samples_per_s=samples_per_s,
        tokens_per_s=tokens_per_s,
        time_to_train_s=time_to_train,
        mfu=mfu,
        scaling_efficiency=scaling,
        timing={
            "forward_s": timing.forward_s,
            "backward_s": timing.backward_s,
            "optimizer_s": timing.optimizer_s,
            "communication_s": timing.communication_s,
            "exposed_communication_s": timing.exposed_communication_s,
            "offload_s": timing.offload_s,
            "pipeline_bubble_s": timing.pipeline_bubble_s,
            "compute_bound_fraction": timing.compute_bound_fraction,
        },
        setup=setup_dict(traced, ctx, batch),
        assumptions=tuple(assumptions(traced, ctx, timing, memory)),
        notes=tuple(notes),
        activation_peak_bytes=memory.activation_peak_bytes,
        pageable_bytes=memory.pageable_bytes,
        host_memory_bytes_per_node=memory.host_bytes_per_gpu * nodes_gpus
        if memory.host_bytes_per_gpu
        else None,
        advice=advice,
    )

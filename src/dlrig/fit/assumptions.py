"""The assumptions every estimate lists, in words, from the facts it used."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlrig.fit import checkpointing
from dlrig.fit.context import calibration, time_setup
from dlrig.fit.parallel import activation_scale, mesh_of
from dlrig.units import human_bytes

if TYPE_CHECKING:
    from dlrig.fit.context import Context
    from dlrig.fit.memory import MemoryEstimate
    from dlrig.fit.options import Options
    from dlrig.fit.timing import StepTime
    from dlrig.fit.tracing import TracedWorkload

_PRECISION = {
    "fp32": "fp32 everywhere (convolutions use TF32 as cuDNN does by default on Ampere+)",
    "tf32": "fp32 storage, TF32 tensor-core matmuls and convolutions",
    "amp-fp16": "fp32 weights and optimizer, fp16 autocast compute (GradScaler overhead ignored)",
    "amp-bf16": "fp32 weights and optimizer, bf16 autocast compute",
    "bf16": "bf16 weights, gradients and optimizer state",
    "fp16": "fp16 weights, gradients and optimizer state, every op in fp16 (model.half(); the "
    "compute of apex amp O2, whose fp32 master copy in the optimizer is not added)",
}


def _strategy(o: Options) -> str:
    if not o.fsdp_mixed_units:
        return _STRATEGY[o.strategy]
    return (
        f"{o.strategy} as FSDP1 units that flatten frozen and trainable weights together "
        "(use_orig_params=True, one unit per repeated layer plus a root unit): the frozen "
        "weights get gradients (their memory and reduce-scatter counted, not their backward "
        "matmuls)"
        + (", kept unsharded over the micro-batches (no_sync)" if not o.grad_sync else "")
    )


_STRATEGY = {
    "ddp": "DDP: every GPU holds everything; gradient buckets (gradient_as_bucket_view=False) add one gradient copy",
    "zero1": "ZeRO-1 (DeepSpeed): compute-dtype module, fp32 master + optimizer state partitioned, 5e8-element buckets",
    "zero2": "ZeRO-2 (DeepSpeed): as ZeRO-1 and gradients partitioned",
    "zero3": "ZeRO-3 (DeepSpeed): parameters partitioned too, gathered one layer at a time",
    "fsdp": "FSDP full shard (FSDP2, MixedPrecisionPolicy param bf16/reduce fp32): one unit per repeated layer plus a root unit",
    "hsdp": "FSDP hybrid shard: sharded within a node, replicated across nodes",
    "fsdp-grad-op": "FSDP SHARD_GRAD_OP: parameters stay gathered from forward to backward",
}


def assumptions(
    traced: TracedWorkload, ctx: Context, timing: StepTime, memory: MemoryEstimate
) -> list[str]:
    table = calibration()
    fitted = table["fitted"]
    o = ctx.options
    out = [
        f"GPU: {ctx.spec.id} ({ctx.gpu_origin}), {human_bytes(ctx.memory_bytes)} usable; "
        f"dense peaks from the GPU catalogue ({ctx.spec.source.split(';')[0][:80]})",
        f"precision {ctx.precision} ({ctx.precision_why}): {_PRECISION[ctx.precision]}",
        "memory traced on fake tensors for one steady-state step (optimizer state already "
        "allocated); attention uses fused-kernel memory (flash / memory-efficient: no S×S scores kept)",
        f"CUDA context {human_bytes(table['sizes']['cuda_context_bytes'])} and cuBLAS workspace "
        f"{human_bytes(table['sizes']['cublas_workspace_bytes'])} added; allocator reserve "
        f"{fitted['allocator_reserve_factor']:.2f}× the dynamic allocations (fragmentation)",
    ]
    if traced.depths:
        out.append(
            f"traced {traced.depths[0]} and {traced.depths[1]} of {traced.layers} identical layers; "
            "sizes, memory peaks and time extrapolated to the full depth (affine in the layer count)"
        )
    if o.keep_grads:
        out.append(
            "gradients stay allocated between steps (zero_grad(set_to_none=False), --keep-grads): "
            "they are in memory during the forward pass too"
        )
    if o.optimizer == "adamw-8bit":
        out.append(
            "optimizer adamw-8bit (bitsandbytes): two 8-bit states + block scales, sized analytically; "
            "its fused in-place update allocates no temporaries"
        )
    elif o.optimizer in ("paged-adamw", "paged-adamw-8bit"):
        bits = "8-bit states + block scales" if o.optimizer.endswith("8bit") else "fp32 states"
        out.append(
            f"optimizer {o.optimizer} (bitsandbytes' paged AdamW, {bits}): the state lives in "
            "CUDA unified memory and pages to host RAM when the GPU runs short, so it counts in "
            "the peak but need not fit; what pages out crosses PCIe twice a step (in the step time)"
        )
    elif o.optimizer == "adafactor":
        out.append("optimizer adafactor (transformers): factored state traced")
    else:
        out.append(
            {
                "foreach": f"optimizer {o.optimizer} with foreach kernels (PyTorch's CUDA default): "
                "its temporaries are parameter-sized",
                "for-loop": f"optimizer {o.optimizer} stepping one parameter at a time (foreach=False)",
                "fused": f"optimizer {o.optimizer} with fused=True (one kernel, no temporaries)",
            }[o.optimizer_impl]
        )
    if o.lora or o.qlora:
        rank = o.lora or o.qlora or 0
        out.append(
            f"{'QLoRA' if o.qlora else 'LoRA'} rank {rank} via peft (alpha {o.lora_alpha or 2 * rank:g}, "
            f"dropout {o.lora_dropout:g}, "
            f"targets {o.lora_targets or 'peft default for the model'}"
            + (f", {o.modules_to_save} trained in full" if o.modules_to_save else "")
            + "): base frozen in the compute dtype, "
            "adapters fp32; frozen weights have no gradients or optimizer state"
        )
    if o.qlora:
        absmax = (
            "double-quantised absmax"
            if o.double_quant
            else "an fp32 absmax per 64 weights (--no-double-quant)"
        )
        out.append(
            f"QLoRA base: NF4 4-bit codes + {absmax} (bitsandbytes Linear4bit; the output head "
            "stays 16-bit); each matmul dequantises a transient compute-dtype copy"
        )
    if o.activations == "fused":
        out.append(
            "activations fused (--activations fused): transformers' composite tanh-GELUs "
            "(gelu_new, gelu_fast) traced as one kernel that keeps only its input"
        )
    elif o.activations == "liger":
        out.append(
            "Liger's kernels (--activations liger): RMSNorm/LayerNorm, the rotary embedding "
            "and the gated MLP's activation each one fused kernel forward and backward (their "
            "intermediates never in memory; a gradient summed inside one is its own kernel), "
            "tanh-GELUs one kernel; projections and LoRA adapters eager"
            + ("" if o.compile == "none" else "; torch.compile fuses them anyway")
        )
    out.append(
        f"time: per-operator roofline by operator class: tensor-core matmuls at "
        f"{fitted['tensor_core_efficiency']:.2f}× the measured matmul ceiling "
        f"({time_setup(ctx).mamf_ratio:.2f}× dense peak), fp32 CUDA-core matmuls at "
        f"{fitted['fp32_efficiency']:.2f}× peak, convolutions as matmuls (NCHW on tensor cores "
        f"{fitted['nchw_conv_efficiency']:.2f}× that, plus the layout transposes), "
        f"fused attention {fitted['attention_efficiency'] * time_setup(ctx).attention_ratio:.2f}× "
        "peak, memory-bound kernels at "
        f"{fitted['memory_bandwidth_efficiency']:.2f}× bandwidth, +{fitted['kernel_tail_us']:g} µs per "
        f"computing kernel (at most its own time), ≥ {fitted['min_kernel_us']:g} µs per operator (fitted on "
        "benchmarks/data/measured_training.csv without its held-out rows)"
    )
    out.append(_compile_line(o.compile) + "; data loading keeps up with the GPU")
    if o.loss_chunks:
        out.append(
            f"chunked cross-entropy (--loss-chunks {o.loss_chunks}, torchtune's "
            "CEWithChunkedOutputLoss): the output projection over the sequence in "
            f"{o.loss_chunks} chunks, each chunk's logits upcast to fp32 for its own loss"
        )
    if o.fp8:
        setup = time_setup(ctx)
        out.append(
            f"Float8 linears (--fp8, torchao float8 / Transformer Engine, dynamic tensorwise "
            f"scaling): 16-bit matmuls of forward and backward at the FP8 peak, "
            f"{fitted['tensor_core_efficiency']:.2f}× its measured ceiling "
            f"({setup.fp8_mamf_ratio:.2f}× dense FP8 peak), the output projection included; "
            "each operand's amax and cast add memory traffic"
            + (" fused into the kernel that made it" if o.compile != "none" else " and two kernels")
            + "; memory as bf16 (high-precision inputs saved for backward)"
        )
    if mesh_of(o).data_parallel > 1:
        setup = time_setup(ctx)
        out.append(
            f"{setup.gpus} data-parallel GPUs, {_strategy(o)}; {setup.interconnect} at "
            f"{timing.bus_bandwidth_gbs:.0f} GB/s collective bus bandwidth"
            + (
                f", {setup.network_gbps:g} Gb/s per GPU between nodes"
                if setup.gpus > setup.gpus_per_node
                else ""
            )
            + f"; communication overlaps {fitted['overlap_fraction']:.0%} of the compute it can hide under, "
            f"{fitted['collective_latency_us']:g} µs per collective (× (1 + log2 nodes) across nodes)"
        )
    mesh = mesh_of(o)
    if not mesh.trivial:
        out.append(
            f"model parallel: {mesh.describe()} = {o.gpus} GPUs; each GPU holds 1/{mesh.tp} of "
            f"the largest pipeline stage's weights"
            + (
                f", replicated over {mesh.data_parallel} data-parallel GPUs"
                if o.strategy == "ddp"
                else f", {o.strategy} shards the optimizer state over {mesh.data_parallel} GPUs"
                if o.strategy == "zero1"
                else f", {o.strategy} shards them over {mesh.data_parallel} GPUs"
            )
            + f", and {activation_scale(mesh):.3g}× the traced micro-batch's activations"
            + (" (sequence parallel)" if mesh.tp > 1 else "")
            + f"; compute split evenly over {mesh.compute_split} GPUs at the same efficiency; "
            "tensor- and context-parallel collectives exposed (async TP would hide some)"
            + (
                f"; pipeline bubble {(mesh.bubble - 1):.0%} of the busy time "
                f"({timing.pipeline_bubble_s * 1e3:.0f} ms)"
                if mesh.pp > 1
                else ""
            )
        )
    if o.offload != "none":
        out.append(
            f"CPU offload of {'optimizer state' if o.offload == 'optimizer' else 'parameters, gradients and optimizer state'}: "
            f"{human_bytes(memory.host_bytes_per_gpu)} of host RAM per GPU; the host Adam step runs at "
            f"{fitted['host_memory_gbs_per_gpu']:g} GB/s per GPU, transfers over PCIe"
        )
    if o.activation_offload:
        out.append(
            "activation offloading (torchtune's OffloadActivations): the activations saved for "
            "backward go to pinned host memory on a side stream and come back for backward, "
            f"{human_bytes(memory.offloaded_activation_bytes)} per micro-batch each way over "
            "the host link at 80% of its PCIe rate; the GPU keeps the layer in flight and the "
            "next, and only the transfer that outlasts the compute is added to the step"
        )
    if o.grad_checkpointing != "none":
        out.append(
            f"gradient checkpointing: {o.grad_checkpointing} (transformers' gradient_checkpointing_enable, non-reentrant"
            + (
                f", on {checkpointing.describe(o.checkpoint_blocks)} evenly spaced as fms-fsdp's "
                "selective_checkpointing; the others keep their activations and are not replayed"
                if o.checkpoint_blocks != 1.0
                else ""
            )
            + (
                ", torchtitan's op-level policy: keep every other matmul and attention outputs"
                if o.grad_checkpointing == "selective"
                else ""
            )
            + ")"
        )
    return out


def _compile_line(scope: str) -> str:
    if scope == "none":
        return "eager PyTorch: no torch.compile fusion, no CUDA graphs"
    what = (
        "the whole model and loss (--compile)"
        if scope == "model"
        else "each repeated block and the loss; embedding, final norm and output projection "
        "eager (--compile-blocks, torchtitan)"
    )
    return (
        f"torch.compile of {what}: consecutive memory-bound operators timed as one kernel "
        "(inputs read once, only what outlives it written); pointwise results recomputed in "
        "backward instead of saved, as AOTAutograd's min-cut partitioner does; no CUDA graphs"
    )

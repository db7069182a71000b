"""Causes that slow a training step without crashing it, as `dlrig profile` measures them from
a step's time split: the host cannot launch work fast enough, communication is not hidden under
compute, matrix multiplies run in FP32, the optimizer launches one kernel per tensor. (A starved
input pipeline is `input_pipeline_bound`, which bench and monitor find too.)"""

from __future__ import annotations

from dlrig.causes.model import Cause

CAUSES: tuple[Cause, ...] = (
    Cause(
        "launch_bound",
        "The GPU waits for the host",
        "Between kernels the GPU sits idle while the host runs Python, launches the next "
        "kernel or waits on a synchronisation (`.item()`, `.cpu()`, a print of a tensor). "
        "Small models, small micro-batches and many small kernels make each step's launch "
        "cost larger than the work it launches.",
        "Capture the step in CUDA graphs or compile it (torch.compile(model, "
        "mode='reduce-overhead')), raise the micro-batch so each kernel does more, and remove "
        "per-step host synchronisations (log the loss every N steps, not every step).",
        crashes=False,
    ),
    Cause(
        "communication_exposed",
        "The GPU waits for communication",
        "Gradient all-reduce (or FSDP's all-gather and reduce-scatter) runs while no compute "
        "kernel runs: the collectives are not overlapped with the backward pass, the buckets "
        "are too small or too large to overlap, or the interconnect is slower than the step "
        "needs (PCIe or Ethernet instead of NVLink or InfiniBand).",
        "Let DDP overlap the all-reduce with backward (DistributedDataParallel(..., "
        "bucket_cap_mb=25..100, gradient_as_bucket_view=True); FSDP backward_prefetch="
        "BACKWARD_PRE, forward_prefetch=True), accumulate gradients with no_sync() to "
        "communicate less often, and check the interconnect with `dlrig bench comms`.",
        crashes=False,
    ),
    Cause(
        "fp32_matmuls",
        "Matrix multiplies run in FP32",
        "The GEMM kernels are single precision (cuBLAS `sgemm`, hipBLASLt `SB` kernels), which "
        "run on the GPU's FP32 units at a fraction of its tensor-core rate: an A100 does 19.5 "
        "TFLOP/s in FP32 and 312 in BF16.",
        "Train under torch.autocast('cuda', dtype=torch.bfloat16) (fp16 with a GradScaler "
        "on GPUs without bf16), or at least allow TF32 with "
        "torch.set_float32_matmul_precision('high').",
        crashes=False,
    ),
    Cause(
        "optimizer_unfused",
        "The optimizer launches one kernel per tensor",
        "The optimizer step runs its update as a loop over parameters, each a few small "
        "kernels, so a model with hundreds of tensors spends its optimizer step launching "
        "kernels rather than computing.",
        "Use the multi-tensor implementations: torch.optim.AdamW(..., foreach=True) or "
        "fused=True (CUDA), or apex's FusedAdam.",
        crashes=False,
    ),
)

"""Peak GPU memory per GPU, as nvidia-smi would show it, from a traced step.

The trace is a single-GPU step. Data-parallel strategies change what each GPU holds:

| strategy | parameters            | gradients           | optimizer state     | extra                              |
|----------|-----------------------|---------------------|---------------------|------------------------------------|
| ddp      | full                  | full                | full                | gradient buckets (1x gradients)    |
| zero1    | full, compute dtype   | full, compute dtype | fp32 master+state/N | reduce bucket                      |
| zero2    | full, compute dtype   | 1/N                 | fp32 master+state/N | reduce bucket                      |
| fsdp     | 1/N                   | 1/N                 | 1/N                 | 2 gathered blocks + 1 block's grads |

Activations and temporaries come from the trace's timeline; the persistent parts are placed on
it (optimizer state lives across steps: the estimate is a steady-state step, not the first).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlrig.fit.trace import Trace

PRECISION_BYTES = {
    # precision: (master/param bytes, compute bytes)
    "fp32": (4, 4),
    "tf32": (4, 4),
    "amp-fp16": (4, 2),
    "amp-bf16": (4, 2),
    "bf16": (2, 2),
}


@dataclass(frozen=True)
class MemorySetup:
    precision: str
    strategy: str
    gpus: int
    grad_accum: int
    optimizer: str
    convolutional: bool
    calibration: dict[str, float]
    sizes: dict[str, int]


@dataclass(frozen=True)
class MemoryEstimate:
    peak_bytes: int  # what nvidia-smi shows at the peak
    reserved_bytes: int  # torch.cuda.max_memory_reserved()
    allocated_bytes: int  # torch.cuda.max_memory_allocated()
    breakdown: dict[str, int]
    peak_phase: str


def _state_bytes_per_param(optimizer: str, param_bytes: int) -> float:
    return {
        "sgd": 0.0,
        "sgd-momentum": float(param_bytes),
        "adam": 2.0 * param_bytes,
        "adamw": 2.0 * param_bytes,
        "adamw-8bit": 2.0 + 0.03,  # two int8 states plus block-wise quantisation scales
        "adafactor": 0.0,  # factored: taken from the trace
    }[optimizer]


def persistent_bytes(trace: Trace, setup: MemorySetup) -> dict[str, float]:
    """Parameters, gradients, optimizer state and fixed buffers per GPU for the strategy."""
    n = trace.trainable_count
    frozen = trace.param_count - trace.trainable_count
    master, compute = PRECISION_BYTES[setup.precision]
    gpus = max(1, setup.gpus)
    if setup.optimizer == "adafactor":
        state_full = float(trace.state_bytes)
    else:
        state_full = _state_bytes_per_param(setup.optimizer, master) * n
    mixed = master != compute
    frozen_bytes = frozen * compute
    block = trace.largest_block_params
    if setup.strategy == "ddp" or gpus == 1:
        params: float = master * n + frozen_bytes
        grads: float = master * n
        state: float = state_full
        # DDP gradient buckets (gradient_as_bucket_view=False): one more copy of the gradients
        extra: float = master * n if gpus > 1 else 0.0
    elif setup.strategy in ("zero1", "zero2"):
        # DeepSpeed semantics: the model lives in the compute dtype; fp32 master weights sit with
        # the optimizer state, which is partitioned.
        master_copy = 4.0 * n if mixed else 0.0
        params = compute * n + frozen_bytes
        grads = compute * n / (gpus if setup.strategy == "zero2" else 1)
        state = (state_full + master_copy) / gpus
        extra = compute * min(n, 500_000_000)  # reduce bucket (DeepSpeed reduce_bucket_size 5e8)
    else:  # fsdp, full shard, mixed precision like FSDP2 (fp32 shards, compute-dtype gathers)
        params = (master * n) / gpus + frozen_bytes / gpus
        grads = master * n / gpus
        state = state_full / gpus
        extra = 2.0 * compute * block + master * block  # two gathered blocks, one block's grads
    return {"parameters": params, "gradients": grads, "optimizer_state": state, "buffers": extra}


def estimate_memory(trace: Trace, setup: MemorySetup) -> MemoryEstimate:
    events = trace.events + 2
    live = {
        name: np.zeros(events + 1)
        for name in ("activation", "backward_temp", "gradient", "optimizer_temp")
    }
    for allocation in trace.allocations:
        if allocation.category not in live:
            continue
        start = allocation.start
        end = allocation.end if allocation.end is not None else events
        live[allocation.category][start] += allocation.nbytes
        live[allocation.category][min(end, events)] -= allocation.nbytes
    curves = {name: np.cumsum(diff)[:events] for name, diff in live.items()}
    fixed = persistent_bytes(trace, setup)
    # Gradients follow the trace's timing (created during backward), scaled to the strategy.
    traced_grads = trace.grad_bytes or 1
    grad_curve = curves["gradient"] * (fixed["gradients"] / traced_grads)
    if setup.grad_accum > 1:
        grad_curve = np.full(events, fixed["gradients"])  # kept across micro-batches
    temp_scale = 1.0 / max(1, setup.gpus) if setup.strategy in ("zero1", "zero2", "fsdp") else 1.0
    activation_curve = curves["activation"] + curves["backward_temp"]
    total = (
        fixed["parameters"]
        + fixed["optimizer_state"]
        + fixed["buffers"]
        + grad_curve
        + activation_curve
        + curves["optimizer_temp"] * temp_scale
    )
    peak_index = int(np.argmax(total))
    allocated = float(total[peak_index])
    workspaces = setup.sizes["cublas_workspace_bytes"] + (
        setup.sizes["cudnn_workspace_bytes"] if setup.convolutional else 0
    )
    reserved = allocated * setup.calibration["allocator_reserve_factor"] + workspaces
    context = setup.sizes["cuda_context_bytes"]
    nccl = setup.sizes["nccl_buffers_bytes"] if setup.gpus > 1 else 0
    peak = reserved + context + nccl
    spans = trace.phase_spans
    phase = "forward"
    for name, (start, end) in spans.items():
        if start <= peak_index < end:
            phase = name
    breakdown = {
        "parameters": int(fixed["parameters"]),
        "gradients": int(grad_curve[peak_index]),
        "optimizer_state": int(fixed["optimizer_state"]),
        "activations": int(activation_curve[peak_index]),
        "optimizer_temporaries": int(curves["optimizer_temp"][peak_index] * temp_scale),
        "communication_buffers": int(fixed["buffers"]),
        "allocator_reserve": int(reserved - allocated - workspaces),
        "workspaces": int(workspaces),
        "cuda_context": int(context),
        "nccl_buffers": int(nccl),
    }
    return MemoryEstimate(
        peak_bytes=int(peak),
        reserved_bytes=int(reserved),
        allocated_bytes=int(allocated),
        breakdown=breakdown,
        peak_phase=phase,
    )

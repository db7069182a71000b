"""OOM back-off, agreed by every rank: halve the micro-batch together, keep the global batch.

The error is caught by its type (`torch.OutOfMemoryError`, which `torch.cuda.OutOfMemoryError`
aliases), never by matching its text: Composer missed OOMs that way (mosaicml/composer#3397).
Under DDP the ranks agree through the gradient all-reduce (see `AgreedGradients`): a rank that
backs off alone would deadlock the others (composer#2117, #3510). After an OOM the gradients
and the loss scaler's per-step state are reset and the same batch is run again.

On the CPU an out-of-memory kills the process (the kernel's OOM killer) instead of raising,
so back-off is on by default only on CUDA; tests inject the error with `OomInjector`.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from dlrig import causes
from dlrig.train.accumulation import AgreedGradients, BatchPlan
from dlrig.train.distributed import World
from dlrig.train.log import RunLog
from dlrig.train.precision import TrainError

if TYPE_CHECKING:  # dlrig.fit is imported only when the function runs
    from dlrig.fit.options import Options as FitOptions


@dataclass
class OomInjector:
    """Raise `torch.OutOfMemoryError` on one rank at one step while the micro-batch is above a
    limit: a stand-in for a GPU's memory on machines without one (tests, CI)."""

    rank: int
    step: int
    above_micro_batch: int = 1

    def check(self, rank: int, step: int, micro_batch: int) -> None:
        if rank == self.rank and step == self.step and micro_batch > self.above_micro_batch:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory (injected by dlrig.train on rank {rank} at step {step}, "
                f"micro-batch {micro_batch} > {self.above_micro_batch})"
            )


def choose(
    requested: bool | str,
    device: torch.device,
    fsdp: bool,
    ddp: bool,
    module: torch.nn.Module,
    world: World,
    log: RunLog,
) -> tuple[bool, AgreedGradients | None]:
    """Whether OOM back-off is on, and under DDP the buffer through which the ranks agree."""
    on = requested is True or (requested == "auto" and device.type == "cuda")
    if fsdp and on:
        if requested is True:
            raise TrainError(
                "oom_backoff=True under FSDP is not supported: its reduce-scatter runs "
                "inside backward, where one rank's OOM would leave the others waiting",
                fix="oom_backoff=False, and a micro_batch that fits (dlrig fit estimates it)",
            )
        log.decide("backoff", "OOM back-off: off under FSDP")
        return False, None
    if on and ddp:
        log.decide(
            "backoff",
            "OOM back-off on: the ranks agree through the gradient all-reduce (one "
            "collective per step carries the gradients and the OOM flag)",
        )
        return True, AgreedGradients(list(module.parameters()), world.world_size)
    if on:
        log.decide("backoff", "OOM back-off on: an OOM halves the micro-batch")
    return on, None


def release_memory(device: torch.device) -> None:
    """Give the failed attempt's memory back before trying again."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def reset_scaler(scaler: torch.amp.GradScaler | None) -> None:
    """Forget this step's unscale/found-inf bookkeeping (the step is redone from scratch)."""
    if scaler is not None:
        scaler._per_optimizer_states.clear()


def next_plan(plan: BatchPlan, step: int, ranks_failed: int, log: RunLog) -> BatchPlan:
    """The plan after an OOM on `ranks_failed` ranks, or the cuda_oom finding at micro-batch 1."""
    if plan.micro_batch <= 1 or plan.per_rank <= 1:
        cause = causes.get("cuda_oom")
        raise TrainError(
            f"{cause.title} at step {step} with a micro-batch of 1 on "
            f"{ranks_failed} rank{'s' if ranks_failed > 1 else ''}: the model does not fit even "
            "one sample at a time",
            fix=cause.default_fix,
            cause=cause.id,
        )
    smaller = plan.halved()
    old_micro = min(plan.micro_batch, plan.per_rank)
    log.decide(
        f"backoff:{smaller.micro_batch}",
        f"step {step}: out of memory on {ranks_failed} of {plan.world_size} rank"
        f"{'s' if plan.world_size > 1 else ''} at micro-batch {old_micro} -> micro-batch "
        f"{smaller.micro_batch} on every rank, {smaller.accumulation} micro-steps; global "
        f"batch stays {smaller.global_batch}",
        step=step,
    )
    return smaller


def micro_batch_from_fit(options: FitOptions) -> int:
    """The largest micro-batch `dlrig fit` estimates fits for `options` (a `dlrig.fit.Options`:
    model=..., gpu=..., seq_len=...).

    Optional: only this function imports `dlrig.fit` (and transformers through it).
    """
    from dlrig import fit  # lazy: numpy and transformers, only when a fit decides the batch

    result = fit.run(options)
    if not result.max_batch_size:
        raise TrainError(
            f"dlrig fit: {result.model} does not fit one sample on {result.gpu}",
            fix="enable activation_checkpointing, a lower precision or sharding (FSDP)",
            cause="cuda_oom",
        )
    return int(result.max_batch_size)

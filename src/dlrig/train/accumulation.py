"""One optimizer step's batch, cut into micro-batches, and the batch sizes that must hold.

The global batch is what the optimizer sees per step; it is kept when the number of GPUs changes
or when an OOM halves the micro-batch: `per_rank = global / ranks` and `accumulation =
ceil(per_rank / micro)`. Each micro-batch's loss is weighted by its share of the rank's batch
(a mean over micro-batches of unequal size is still the batch mean), and that is the only
scaling applied: the user's loss is not divided again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class BatchPlan:
    global_batch: int
    world_size: int
    micro_batch: int

    @property
    def per_rank(self) -> int:
        return self.global_batch // self.world_size

    @property
    def accumulation(self) -> int:
        if self.per_rank == 0:  # the user's batch sampler sets the batch
            return 1
        return max(1, math.ceil(self.per_rank / self.micro_batch))

    def halved(self) -> BatchPlan:
        return replace(self, micro_batch=max(1, self.micro_batch // 2))

    def micro_sizes(self) -> list[int]:
        """The micro-batches one rank's batch is cut into (`split` cuts it so): the last one
        smaller when the micro-batch does not divide the rank's batch."""
        if self.per_rank == 0:
            return []
        micro = min(self.micro_batch, self.per_rank)
        full, rest = divmod(self.per_rank, micro)
        return [micro] * full + ([rest] if rest else [])

    def describe(self) -> str:
        """The equation of what is really run, true whether or not the sizes divide."""
        ranks = f"{self.world_size} rank{'s' if self.world_size > 1 else ''}"
        if self.per_rank == 0:
            return f"batches from your batch sampler on {ranks}, micro-batch {self.micro_batch}"
        sizes = self.micro_sizes()
        steps = f"{len(sizes)} micro-step{'s' if len(sizes) > 1 else ''}"
        head = f"global batch {self.global_batch} = {ranks} × "
        if len(set(sizes)) == 1:
            return head + f"{steps} × {sizes[0]} samples"
        # e.g. 100 = 1 rank × 4 micro-steps (3 of 32 samples, 1 of 4): 3 × 32 + 4 = 100.
        return head + f"{steps} ({len(sizes) - 1} of {sizes[0]} samples, 1 of {sizes[-1]})"

    def to_dict(self) -> dict[str, int]:
        return {
            "global_batch": self.global_batch,
            "world_size": self.world_size,
            "per_rank_batch": self.per_rank,
            "micro_batch": min(self.micro_batch, self.per_rank or self.micro_batch),
            "accumulation": self.accumulation,
        }


def batch_length(value: Any) -> int | None:
    """The batch dimension: the length of the first tensor found (depth first)."""
    if isinstance(value, torch.Tensor):
        return int(value.shape[0]) if value.dim() > 0 else None
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list | tuple):
        for item in value:
            found = batch_length(item)
            if found is not None:
                return found
    return None


def _slice(value: Any, start: int, stop: int, length: int) -> Any:
    if isinstance(value, torch.Tensor):
        if value.dim() > 0 and value.shape[0] == length:
            return value[start:stop]
        return value
    if isinstance(value, dict):
        return {k: _slice(v, start, stop, length) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, torch.Tensor | dict | list | tuple) for v in value):
            parts = [_slice(v, start, stop, length) for v in value]
            return type(value)(parts) if isinstance(value, list) else tuple(parts)
        if len(value) == length:
            return value[start:stop]  # per-sample items: strings, ids
    return value


def split(args: Sequence[Any], micro_batch: int) -> list[tuple[tuple[Any, ...], float]]:
    """(micro-batch arguments, weight) pairs; weights are the micro-batch's share of the batch."""
    length = batch_length(list(args))
    if length is None or length <= micro_batch:
        return [(tuple(args), 1.0)]
    return [
        (
            tuple(_slice(a, start, min(start + micro_batch, length), length) for a in args),
            (min(start + micro_batch, length) - start) / length,
        )
        for start in range(0, length, micro_batch)
    ]


class AgreedGradients:
    """Gradients in one flat buffer per dtype, plus one slot that says how many ranks hit OOM.

    With OOM back-off under DDP every micro-step runs in `no_sync`, and this buffer is
    all-reduced once per step: one collective carries the gradients *and* the OOM flag, so
    agreeing costs no extra collective. A rank that ran out of memory contributes zeros and a 1
    and never leaves another rank waiting in a gradient all-reduce it will not reach. What it
    costs is DDP's overlap of communication with the backward pass (measured in
    benchmarks/train_overhead.py).
    """

    def __init__(self, params: Sequence[torch.nn.Parameter], world_size: int) -> None:
        self.world_size = world_size
        self.params = [p for p in params if p.requires_grad]
        groups: dict[tuple[torch.dtype, torch.device], list[torch.nn.Parameter]] = {}
        for p in self.params:
            groups.setdefault((p.dtype, p.device), []).append(p)
        self.flats: list[torch.Tensor] = []
        self.views: list[torch.Tensor] = []
        self._bound: list[torch.nn.Parameter] = []
        for index, ((dtype, device), members) in enumerate(groups.items()):
            extra = 1 if index == 0 else 0
            flat = torch.zeros(sum(p.numel() for p in members) + extra, dtype=dtype, device=device)
            offset = 0
            for p in members:
                view = flat[offset : offset + p.numel()].view_as(p)
                if p.grad is not None:
                    view.copy_(p.grad)
                p.grad = view
                self.views.append(view)
                self._bound.append(p)
                offset += p.numel()
            self.flats.append(flat)
        if not self.flats:
            self.flats.append(torch.zeros(1))

    def bind(self) -> None:
        """Re-attach a gradient something replaced (a user's `zero_grad(set_to_none=True)`)."""
        for p, view in zip(self._bound, self.views, strict=True):
            grad = p.grad
            if grad is not view:
                if grad is None:
                    view.zero_()
                else:
                    view.copy_(grad)
                p.grad = view

    def zero(self) -> None:
        for flat in self.flats:
            flat.zero_()

    def reduce(self, out_of_memory: bool, group: Any = None) -> int:
        """All-reduce gradients and flag; the number of ranks that ran out of memory."""
        self.bind()
        flag = self.flats[0][-1:]
        if out_of_memory:
            self.zero()
            flag.fill_(1)
        else:
            flag.zero_()
        works = [dist.all_reduce(flat, async_op=True, group=group) for flat in self.flats]
        for work in works:
            if work is not None:
                work.wait()
        failed = int(flag.item())
        if failed == 0:
            for flat in self.flats:
                flat.div_(self.world_size)
        return failed

"""The user's DataLoader, sharded across ranks without replacing their sampler, and resumable.

What the loader yields is one optimizer step's batch for this rank (`per_rank_batch` samples);
`Run.step` splits it into micro-batches. The order of an epoch is whatever the user's sampler
draws (a `WeightedRandomSampler` keeps its weights, a custom order stays that order):

- one process: the sampler is iterated as the plain DataLoader would iterate it, drawing from
  the same generators in the same order, so a run matches a plain loop bit for bit;
- several ranks: every rank iterates its own copy (so random streams stay aligned), rank 0's
  order is broadcast, and rank r takes positions r, r+N, r+2N, ... (DistributedSampler's
  sharding, padded so every rank gets the same number of batches and none waits for another);
- a user's own `DistributedSampler` is already per rank: it is kept, with `set_epoch` called.

Because the sharding is strided, the batches all ranks have consumed are always a prefix of the
epoch's order. The checkpoint stores that order and how far into it the run got, so a resume
continues at the next sample, even on a different number of ranks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DistributedSampler, RandomSampler

from dlrig.train import rng
from dlrig.train.distributed import World
from dlrig.train.log import RunLog


@dataclass
class Timing:
    """Seconds the loop spent waiting for data; counted by the loader, read by the summary."""

    data_wait_s: float = 0.0
    samples: int = 0
    # Set when the first step ends: that step (lazy initialisation, the allocator warming up,
    # torch.compile compiling) and its batch are start-up, not the run's steady state.
    started: float | None = None
    start_step: int = 0
    start_samples: int = 0
    # Where a resumed run took over (the checkpoint's counters); 0 for a fresh run.
    resumed_step: int = 0
    resumed_samples: int = 0


@dataclass
class Position:
    """Where an epoch stands: its order (for a global order: the padded order of all ranks)."""

    epoch: int = 0
    consumed: int = 0  # per-rank batches handed to the loop in this epoch
    order: list[Any] | None = None
    world_size: int = 1
    per_rank_batch: int = 1

    def to_state(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "consumed": self.consumed,
            "order": self.order,
            "world_size": self.world_size,
            "per_rank_batch": self.per_rank_batch,
        }


def default_shuffle(sampler: Any) -> bool:
    """The RandomSampler DataLoader(shuffle=True) makes, as opposed to one the user configured."""
    return (
        type(sampler) is RandomSampler
        and not sampler.replacement
        and getattr(sampler, "_num_samples", None) is None
    )


@dataclass
class ShardedBatches:
    """The batch sampler handed to the rebuilt DataLoader (see the module docstring)."""

    source: Any  # the user's sampler, or their batch sampler when `unit == "batch"`
    unit: str  # "sample": source yields indices; "batch": source yields lists of indices
    kind: str  # "global" (shard rank 0's order) | "per_rank" (a DistributedSampler)
    world: World
    per_rank_batch: int
    drop_last: bool
    position: Position = field(default_factory=Position)
    on_order: Callable[[], None] | None = None  # resume hook: runs once the order is drawn
    _resume_order: list[Any] | None = None
    _resume_skip: int = 0  # units of the stored order already consumed by all ranks

    def __len__(self) -> int:
        total = len(self.source)
        if self.kind == "global":
            total = (
                total // self.world.world_size
                if self.drop_last
                else math.ceil(total / self.world.world_size)
            )
        if self.unit == "batch":
            return total
        if self.drop_last:
            return total // self.per_rank_batch
        return math.ceil(total / self.per_rank_batch)

    def resume(self, order: list[Any] | None, skip_units: int) -> None:
        self._resume_order = order
        self._resume_skip = skip_units

    def _draw(self) -> list[Any]:
        if isinstance(self.source, DistributedSampler):
            self.source.set_epoch(self.position.epoch)
        drawn = list(self.source)
        if self.unit == "batch":
            drawn = [list(b) for b in drawn]
        elif drawn and not isinstance(drawn[0], int):
            drawn = [int(i) for i in drawn]  # a sampler yielding tensors or NumPy integers
        if self.kind == "global" and self.world.distributed:
            drawn = self.world.broadcast_object(drawn)
        return drawn

    def _padded(self, order: list[Any]) -> list[Any]:
        """A global order cut or padded to a multiple of the ranks (so no rank waits)."""
        size = self.world.world_size
        if self.kind != "global" or size == 1 or not order:
            return order
        if self.drop_last:
            return order[: len(order) - len(order) % size]
        missing = -len(order) % size
        while missing:
            extra = order[:missing]
            order = order + extra
            missing -= len(extra)
        return order

    def __iter__(self) -> Iterator[list[int]]:
        return self._batches()

    def _batches(self) -> Iterator[list[int]]:
        # A generator: nothing is drawn until the DataLoader asks for the first batch, exactly
        # when a plain DataLoader's sampler draws (after the workers' base seed).
        if self._resume_order is not None:
            order = self._padded(self._resume_order[self._resume_skip :])
            self._resume_order = None
        else:
            # A skip without a stored order (a world change under a per-rank sampler) restarts
            # the epoch.
            order = self._padded(self._draw())
        self._resume_skip = 0
        self.position.order = order
        self.position.world_size = self.world.world_size
        self.position.per_rank_batch = self.per_rank_batch
        if self.on_order is not None:
            hook, self.on_order = self.on_order, None
            hook()
        ranks = self.world.world_size
        mine = order[self.world.rank :: ranks] if self.kind == "global" and ranks > 1 else order
        if self.unit == "batch":
            yield from mine
            return
        size = self.per_rank_batch
        stop = len(mine) - len(mine) % size if self.drop_last else len(mine)
        for start in range(0, stop, size):
            yield mine[start : start + size]


class StopFlag:
    """Set by max_steps or by SIGTERM: the loader ends the epoch at the next batch."""

    __slots__ = ("requested",)

    def __init__(self) -> None:
        self.requested = False


@dataclass(eq=False)
class TrainLoader:
    """Iterates the rebuilt DataLoader: times the wait for each batch, counts the position."""

    loader: Any
    batches: ShardedBatches | None
    timing: Timing
    stop: StopFlag
    generators: dict[str, torch.Generator]
    log: RunLog
    position: Position = field(init=False)
    epoch_start_rng: dict[str, Any] | None = field(default=None, init=False)
    _pending_epoch_rng: dict[str, Any] | None = field(default=None, init=False)
    _pending_rng: dict[str, Any] | None = field(default=None, init=False)
    # An IterableDataset resumes by reading past what it gave.
    _skip_batches: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.position = self.batches.position if self.batches is not None else Position()

    @property
    def dataset(self) -> Any:
        return self.loader.dataset

    @property
    def batch_size(self) -> int | None:
        return self.batches.per_rank_batch if self.batches is not None else None

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        self.position.epoch = epoch

    # --- resume ---------------------------------------------------------------------------

    def restore(self, state: dict[str, Any], rng_state: dict[str, Any] | None) -> str:
        """Put the loader where the checkpoint left it; says what it did, in words."""
        epoch = int(state["epoch"])
        consumed = int(state["consumed"])
        order = state.get("order")
        self.position.epoch = epoch
        self._pending_rng = rng_state
        if consumed == 0 or (order is None and self.batches is not None):
            self.position.consumed = 0
            if consumed and self.batches is not None:
                return f"epoch {epoch} restarts (its order could not be carried to this world)"
            return f"the start of epoch {epoch}"
        self.position.consumed = consumed
        self._pending_epoch_rng = state.get("epoch_start_rng")
        if self.batches is None:
            self._skip_batches = consumed
            return f"epoch {epoch}, reading past its first {consumed} batches"
        old_world = int(state.get("world_size", 1))
        unit_per_batch = 1 if self.batches.unit == "batch" else int(state["per_rank_batch"])
        if self.batches.kind == "per_rank":
            if old_world != self.batches.world.world_size:
                self.position.consumed = 0
                self._pending_epoch_rng = None
                return f"epoch {epoch} restarts (the ranks changed under a DistributedSampler)"
            skip = consumed * unit_per_batch
        else:
            skip = consumed * unit_per_batch * old_world
        self.batches.resume(list(order or ()), skip)
        self.position.consumed = 0
        self.batches.on_order = self._restore_rng
        return f"epoch {epoch}, {consumed} batches in"

    def _restore_rng(self) -> None:
        if self._pending_rng is not None:
            rng.restore(self._pending_rng, self.generators)
            self._pending_rng = None

    # --- iteration ------------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        if self._pending_epoch_rng is not None:
            # Mid-epoch resume: the epoch's iterator draws its workers' seed from the state the
            # generators had when the epoch began; the rest comes back once the order is drawn.
            rng.restore(self._pending_epoch_rng, self.generators)
            self.epoch_start_rng = self._pending_epoch_rng
            self._pending_epoch_rng = None
        else:
            self._restore_rng()
            self.epoch_start_rng = rng.torch_only(self.generators)
        iterator = iter(self.loader)
        self.position.consumed = 0
        if self._skip_batches:
            for _ in range(self._skip_batches):
                next(iterator, None)
            self.position.consumed = self._skip_batches
            self._skip_batches = 0
        return self._run(iterator)

    def _run(self, iterator: Iterator[Any]) -> Iterator[Any]:
        timing = self.timing
        position = self.position
        stop = self.stop
        clock = time.perf_counter
        if stop.requested:
            return
        while True:
            started = clock()
            try:
                batch = next(iterator)
            except StopIteration:
                break
            if timing.started is not None:
                timing.data_wait_s += clock() - started
            position.consumed += 1
            yield batch
            if stop.requested:
                return
        position.epoch += 1
        position.consumed = 0
        position.order = None

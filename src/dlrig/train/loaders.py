"""Rebuilding the user's DataLoader around `ShardedBatches`, and saying what was kept.

A DataLoader's sampler cannot be swapped after it is made, so a new one is built with every
setting of the user's (workers, collate_fn, pin_memory, generator, ...) and only the batch
sampler changed. The user's sampler, or batch sampler, is what `ShardedBatches` iterates.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    SequentialSampler,
)

from dlrig.errors import InputError
from dlrig.train.data import ShardedBatches, default_shuffle
from dlrig.train.distributed import World
from dlrig.train.log import RunLog


def rebuild(
    loader: Any, world: World, global_batch: int | None, log: RunLog
) -> tuple[Any, ShardedBatches | None, int]:
    """A DataLoader like the user's whose batch sampler is `ShardedBatches`, and the per-rank
    batch size (for an IterableDataset: the loader itself, untouched)."""
    if not isinstance(loader, DataLoader):
        raise InputError(
            f"setup_dataloader got a {type(loader).__name__}, not a torch DataLoader",
            fix="pass the torch.utils.data.DataLoader you would iterate",
        )
    size = world.world_size
    if isinstance(loader.dataset, IterableDataset):
        if size > 1:
            log.decide(
                "sampler",
                "IterableDataset: dlrig does not shard it; each rank must read its own part "
                "(split by torch.distributed.get_rank() in the dataset)",
            )
        per_rank = loader.batch_size or 1
        return loader, None, per_rank
    user_batch_sampler = loader.batch_sampler
    if user_batch_sampler is None:
        raise InputError(
            "setup_dataloader: the DataLoader has batch_size=None (no batching)",
            fix="give the DataLoader a batch_size (or a batch_sampler)",
        )
    if type(user_batch_sampler) is BatchSampler:
        source: Any = loader.sampler
        unit = "sample"
        drop_last = bool(user_batch_sampler.drop_last)
        user_batch = int(user_batch_sampler.batch_size)
        if global_batch is None:
            global_batch = user_batch * size
        if global_batch % size:
            raise InputError(
                f"global batch {global_batch} does not split over {size} ranks",
                fix=f"pick a global batch divisible by {size}",
            )
        per_rank = global_batch // size
        if per_rank != user_batch:
            log.decide(
                "loader_batch",
                f"loader batch {user_batch} -> {per_rank} per rank to keep the global batch "
                f"{global_batch} on {size} rank{'s' if size > 1 else ''}",
            )
    else:
        source = user_batch_sampler
        unit = "batch"
        drop_last = False
        per_rank = 0  # the user's batches set the size
        log.decide(
            "sampler",
            f"your batch sampler {type(source).__name__} kept"
            + (f": rank 0's batches, rank r takes batches r, r+{size}, ..." if size > 1 else ""),
        )
    kind = "per_rank" if isinstance(source, DistributedSampler) else "global"
    _explain_sampler(source, unit, kind, size, log)
    batches = ShardedBatches(source, unit, kind, world, per_rank, drop_last)
    kwargs: dict[str, Any] = {
        "batch_sampler": batches,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "persistent_workers": loader.persistent_workers,
    }
    if loader.num_workers > 0:
        kwargs["prefetch_factor"] = loader.prefetch_factor
    if getattr(loader, "pin_memory_device", ""):
        kwargs["pin_memory_device"] = loader.pin_memory_device
    if hasattr(loader, "in_order"):
        kwargs["in_order"] = loader.in_order
    return DataLoader(loader.dataset, **kwargs), batches, per_rank


def _explain_sampler(source: Any, unit: str, kind: str, size: int, log: RunLog) -> None:
    if unit == "batch":
        return
    name = type(source).__name__
    if kind == "per_rank":
        log.decide("sampler", f"your {name} kept (already per rank); set_epoch called each epoch")
    elif type(source) is SequentialSampler:
        if size > 1:
            log.decide(
                "sampler",
                f"no sampler given: rank r takes samples r, r+{size}, ... of the dataset order "
                "(DistributedSampler's sharding, padded to equal lengths)",
            )
    elif default_shuffle(source):
        if size > 1:
            log.decide(
                "sampler",
                f"shuffle=True: rank 0's shuffled order each epoch, rank r takes positions r, r+{size}, ... "
                "(padded to equal lengths)",
            )
    else:
        log.decide(
            "sampler",
            f"your {name} kept"
            + (
                f": rank 0 draws each epoch's order from it and rank r takes positions r, r+{size}, ... "
                "so its weights and order hold across ranks"
                if size > 1
                else ""
            ),
        )


def generators_of(loader: Any) -> dict[str, torch.Generator]:
    """The torch.Generators a DataLoader and its samplers draw from (saved with the RNG)."""
    found: dict[str, torch.Generator] = {}
    if isinstance(getattr(loader, "generator", None), torch.Generator):
        found["loader"] = loader.generator
    for name in ("sampler", "batch_sampler"):
        part = getattr(loader, name, None)
        generator = getattr(part, "generator", None)
        if isinstance(generator, torch.Generator) and all(
            generator is not g for g in found.values()
        ):
            found[name] = generator
        inner = getattr(part, "sampler", None)
        generator = getattr(inner, "generator", None)
        if isinstance(generator, torch.Generator) and all(
            generator is not g for g in found.values()
        ):
            found[f"{name}.sampler"] = generator
    return found

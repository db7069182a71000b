"""The order an epoch reads samples in, for one rank and one DataLoader worker.

1. Shards are taken in a seeded permutation per epoch (or in order, unshuffled), and their
   samples in storage order: one sequence over the whole dataset, made of long runs of
   neighbouring bytes.
2. Rank r of R takes a contiguous slice of it (sizes differ by at most one; with `drop_last`
   every rank gets ⌊N/R⌋ and the few left over sit out this epoch).
3. The rank's slice is shuffled within windows of W samples (a window is a byte range of one
   or two shards, read ahead whole, so shuffled reads stay in the page cache).
4. The rank's sequence is cut into chunks of `batch_size`; worker w of K takes chunks w, w+K,
   w+2K, … The DataLoader collects batches from its workers round-robin, so with the
   DataLoader's batch size equal to `batch_size` it yields the rank's sequence exactly in
   order, whatever K is. Resuming at position p (samples already consumed by this rank)
   restarts the chunking at p: nothing is read twice and nothing is skipped.

Every step is a function of (seed, epoch, rank, world size): the same seed gives the same
order after a restart.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from dlrig.pack.plan import derive_seed


@dataclass(frozen=True)
class EpochSpec:
    seed: int
    epoch: int
    shuffle: bool
    rank: int
    world_size: int
    drop_last: bool
    window: int  # samples per shuffle window


def rank_bounds(total: int, rank: int, world_size: int, drop_last: bool) -> tuple[int, int]:
    if drop_last:
        each = total // world_size
        return rank * each, (rank + 1) * each
    return rank * total // world_size, (rank + 1) * total // world_size


def shard_order(count: int, spec: EpochSpec) -> list[int]:
    order = list(range(count))
    if spec.shuffle:
        random.Random(derive_seed(spec.seed, spec.epoch, "shards")).shuffle(order)
    return order


def rank_runs(
    shard_counts: Sequence[int], shard_first: Sequence[int], spec: EpochSpec
) -> list[tuple[int, int]]:
    """Rank `spec.rank`'s samples this epoch before the window shuffle, as runs of
    neighbouring samples: (first sample number, count), each run inside one shard."""
    total = sum(shard_counts)
    low, high = rank_bounds(total, spec.rank, spec.world_size, spec.drop_last)
    runs: list[tuple[int, int]] = []
    at = 0
    for shard in shard_order(len(shard_counts), spec):
        count = shard_counts[shard]
        begin, end = max(low, at), min(high, at + count)
        if begin < end:
            runs.append((shard_first[shard] + (begin - at), end - begin))
        at += count
        if at >= high:
            break
    return runs


def rank_sequence(
    shard_counts: Sequence[int], shard_first: Sequence[int], spec: EpochSpec
) -> array[int]:
    """Sample numbers rank `spec.rank` reads this epoch, in order (window shuffle applied)."""
    sequence: array[int] = array("q")
    for first, count in rank_runs(shard_counts, shard_first, spec):
        sequence.extend(range(first, first + count))
    if spec.shuffle and spec.window > 1:
        for start in range(0, len(sequence), spec.window):
            window = sequence[start : start + spec.window].tolist()
            random.Random(derive_seed(spec.seed, spec.epoch, spec.rank, "window", start)).shuffle(
                window
            )
            sequence[start : start + len(window)] = array("q", window)
    return sequence


def worker_positions(
    length: int, start: int, batch_size: int, worker: int, workers: int
) -> Iterator[int]:
    """Positions in the rank's sequence that worker `worker` of `workers` yields, in order."""
    chunk = max(1, batch_size)
    for chunk_start in range(start + worker * chunk, length, workers * chunk):
        yield from range(chunk_start, min(chunk_start + chunk, length))


def windows_of(length: int, window: int) -> Iterator[tuple[int, int]]:
    step = max(1, window)
    for start in range(0, length, step):
        yield start, min(start + step, length)

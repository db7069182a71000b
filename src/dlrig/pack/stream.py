"""Streaming a pack in the order of `dlrig.pack.order`, without torch (the torch
IterableDataset and `dlrig pack bench` both read through here).

While a worker reads inside one shuffle window it asks the kernel to read that window and the
next one ahead (`madvise(MADV_WILLNEED)` over their byte ranges): each window is one or two
contiguous runs of a shard, so a cold read is large sequential I/O even when the samples
inside the window are taken in shuffled order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from dlrig.pack.order import EpochSpec, rank_bounds, rank_sequence, windows_of, worker_positions
from dlrig.pack.reader import PackIndex, PackReader


class Stream:
    def __init__(
        self,
        index: PackIndex,
        *,
        batch_size: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        drop_last: bool = False,
        shuffle_window: int | None = None,
    ) -> None:
        self.index = index
        self.reader = PackReader(index)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.drop_last = drop_last
        counts = index.shard_counts
        self.window = shuffle_window or max(1, round(sum(counts) / max(1, len(counts))))

    def __len__(self) -> int:
        low, high = rank_bounds(len(self.index), self.rank, self.world_size, self.drop_last)
        return high - low

    def spec(self, epoch: int) -> EpochSpec:
        return EpochSpec(
            self.seed, epoch, self.shuffle, self.rank, self.world_size, self.drop_last, self.window
        )

    def sequence(self, epoch: int) -> Any:
        """This rank's sample numbers for `epoch`, in reading order."""
        firsts = [shard.first_sample for shard in self.index.shards]
        return rank_sequence(self.index.shard_counts, firsts, self.spec(epoch))

    def samples(
        self,
        epoch: int,
        start: int = 0,
        worker: int = 0,
        workers: int = 1,
        transform: Callable[[bytes], Any] | None = None,
        limit: int | None = None,
    ) -> Iterator[tuple[Any, int]]:
        """(bytes or transform(bytes), label) for worker `worker` of `workers`, from `start`."""
        sequence = self.sequence(epoch)
        length = len(sequence) if limit is None else min(len(sequence), start + limit)
        positions = worker_positions(length, start, self.batch_size, worker, workers)
        return self._read(sequence, positions, transform)

    def _prefetch(self, sequence: Any, start: int, stop: int) -> None:
        ranges: dict[int, list[int]] = {}
        index = self.index
        for sample in sequence[start:stop]:
            shard = index.shard_of[sample]
            bounds = ranges.get(shard)
            if bounds is None:
                ranges[shard] = [index.starts[sample], index.ends[sample]]
            else:
                bounds[0] = min(bounds[0], index.starts[sample])
                bounds[1] = max(bounds[1], index.ends[sample])
        for shard, (low, high) in ranges.items():
            self.reader.prefetch(shard, low, high)

    def _read(
        self, sequence: Any, positions: Iterator[int], transform: Callable[[bytes], Any] | None
    ) -> Iterator[tuple[Any, int]]:
        index, reader = self.index, self.reader
        starts, ends, shard_of, labels = index.starts, index.ends, index.shard_of, index.labels
        maps = reader._maps
        windows = list(windows_of(len(sequence), self.window))
        boundary = -1  # where the window after the current one begins
        number = 0
        for position in positions:
            if position >= boundary:
                while number < len(windows) and windows[number][1] <= position:
                    number += 1
                for ahead in windows[number : number + 2]:
                    self._prefetch(sequence, *ahead)
                boundary = windows[number][1] if number < len(windows) else 1 << 62
            sample = sequence[position]
            view = maps[shard_of[sample]]
            if view is None:
                view = reader._map(shard_of[sample])
            data = view[starts[sample] : ends[sample]]
            yield (transform(data) if transform is not None else data), labels[sample]

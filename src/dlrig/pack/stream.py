"""Streaming a pack in the order of `dlrig.pack.order`, without torch (the torch
IterableDataset and `dlrig pack bench` both read through here).

The rank's sequence is cut into readahead units: its shuffle windows when shuffled (a window
is one or two contiguous runs of a shard, so it can be read whole, in storage order, before
its samples are taken in shuffled order), ~16 MiB of samples when not. A `Readahead` thread
(`dlrig.pack.readahead`) reads the unit being entered and the ones after it (at least 64 MiB
ahead, at least one whole window) while this thread slices samples out of the maps: a cold
read is large sequential I/O that overlaps the work on what is already cached, and a warm
one costs a few probes a unit.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import KW_ONLY, dataclass, field
from itertools import accumulate
from typing import Any

from dlrig.pack.order import EpochSpec, rank_bounds, rank_runs, rank_sequence
from dlrig.pack.readahead import Range, Readahead
from dlrig.pack.reader import PackIndex, PackReader

_SEQUENTIAL_UNIT_BYTES = 16 << 20
_AHEAD_BYTES = 64 << 20


@dataclass(eq=False)
class Stream:
    """One rank's reading of a pack: which samples, in which order, read ahead how."""

    index: PackIndex
    _: KW_ONLY
    batch_size: int = 1
    shuffle: bool = True
    seed: int = 0
    rank: int = 0
    world_size: int = 1
    drop_last: bool = False
    shuffle_window: int | None = None  # default: the mean shard's sample count
    readahead: bool = True
    reader: PackReader = field(init=False, repr=False)
    window: int = field(init=False)

    def __post_init__(self) -> None:
        self.reader = PackReader(self.index)
        counts = self.index.shard_counts
        self.window = self.shuffle_window or max(1, round(sum(counts) / max(1, len(counts))))

    def __len__(self) -> int:
        low, high = rank_bounds(len(self.index), self.rank, self.world_size, self.drop_last)
        return high - low

    def spec(self, epoch: int) -> EpochSpec:
        return EpochSpec(
            self.seed, epoch, self.shuffle, self.rank, self.world_size, self.drop_last, self.window
        )

    def _data_bytes(self) -> int:
        return sum(shard.data_bytes for shard in self.index.shards)

    def _firsts(self) -> list[int]:
        return [shard.first_sample for shard in self.index.shards]

    def sequence(self, epoch: int) -> Any:
        """This rank's sample numbers for `epoch`, in reading order."""
        return rank_sequence(self.index.shard_counts, self._firsts(), self.spec(epoch))

    def samples(
        self,
        epoch: int,
        start: int = 0,
        worker: int = 0,
        workers: int = 1,
        transform: Callable[[Any], Any] | None = None,
        limit: int | None = None,
        views: bool = False,
    ) -> Iterator[tuple[Any, int]]:
        """(bytes or transform(bytes), label) for worker `worker` of `workers`, from `start`;
        with `views`, memoryviews instead of bytes (see `dlrig.pack.reader` on their life)."""
        sequence = self.sequence(epoch)
        length = len(sequence) if limit is None else min(len(sequence), start + limit)
        return self._read(epoch, sequence, length, start, worker, workers, transform, views)

    def _units(self, epoch: int, length: int) -> tuple[int, Callable[[int], list[Range]]]:
        """The readahead unit size (positions) and each unit's byte ranges."""
        index = self.index
        if self.shuffle and self.window > 1:
            step = self.window
        else:
            mean = self._data_bytes() / max(1, len(index))
            step = max(1, int(_SEQUENTIAL_UNIT_BYTES / max(1.0, mean)))
        runs = rank_runs(index.shard_counts, self._firsts(), self.spec(epoch))
        ends = list(accumulate(count for _, count in runs))  # position after each run
        starts, stops, shard_of = index.starts, index.ends, index.shard_of

        def ranges(unit: int) -> list[Range]:
            low, high = unit * step, min(length, (unit + 1) * step)
            out: list[Range] = []
            run = bisect.bisect_right(ends, low)
            while run < len(runs) and low < high:
                first, count = runs[run]
                begin = ends[run] - count
                a, b = first + (low - begin), first + (min(high, ends[run]) - begin)
                out.append((shard_of[a], starts[a], stops[b - 1]))
                low = ends[run]
                run += 1
            return out

        return step, ranges

    def _read(
        self,
        epoch: int,
        sequence: Sequence[int],
        length: int,
        start: int,
        worker: int,
        workers: int,
        transform: Callable[[Any], Any] | None,
        views: bool,
    ) -> Iterator[tuple[Any, int]]:
        index, reader = self.index, self.reader
        starts, ends, shard_of, labels = index.starts, index.ends, index.shard_of, index.labels
        maps: list[Any] = reader._views if views else reader._maps
        fetch = reader._view if views else reader._map
        chunk = max(1, self.batch_size)
        first = start + worker * chunk
        ahead, step = None, 1
        if self.readahead and first < length:
            step, ranges = self._units(epoch, length)
            mean_unit = max(1, self._data_bytes() * step // max(1, len(index)))
            ahead = Readahead(
                index.data_path,
                ranges,
                units=-(-length // step),
                first=first // step,
                ahead=max(1, -(-_AHEAD_BYTES // mean_unit)),
            )
        try:
            for chunk_start in range(first, length, workers * chunk):
                if ahead is not None:
                    ahead.enter(chunk_start // step)
                for sample in sequence[chunk_start : min(chunk_start + chunk, length)]:
                    shard = shard_of[sample]
                    mapped = maps[shard]
                    if mapped is None:
                        mapped = fetch(shard)
                    data = mapped[starts[sample] : ends[sample]]
                    yield (transform(data) if transform is not None else data), labels[sample]
        finally:
            if ahead is not None:
                ahead.stop()

"""torch Datasets over a dlrig pack: map-style (random access) and iterable (sharded, shuffled
by shard and window, resumable), plus a DataLoader that can save and restore its position.

    from dlrig.pack import Dataset, IterableDataset, StatefulLoader
    train = Dataset("/data/imagenet.pack", transform=decode)          # train[i] -> (x, label)
    stream = IterableDataset("/data/imagenet.pack", batch_size=256, seed=0)
    loader = StatefulLoader(stream, num_workers=8)                     # a torch DataLoader
    for epoch in range(epochs):
        for images, labels in loader: ...
        checkpoint["data"] = loader.state_dict()                       # any time, mid-epoch too

Both are plain torch datasets: they work with `torch.utils.data.DataLoader` and anything
built on it. `transform` is called on each sample's original bytes (JPEG, PNG, …) in the
worker; the label comes back beside it.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.context
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.utils.data

from dlrig.errors import InputError
from dlrig.pack.reader import PackIndex, PackReader
from dlrig.pack.stream import Stream

Transform = Callable[[Any], Any]  # bytes, or memoryview with views=True


def _rank_and_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    if rank is not None or world_size is not None:
        rank, world_size = rank or 0, world_size or 1
    elif torch.distributed.is_available() and torch.distributed.is_initialized():
        rank, world_size = torch.distributed.get_rank(), torch.distributed.get_world_size()
    else:
        import os

        rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if not 0 <= rank < world_size:
        raise InputError(f"rank {rank} of world size {world_size}", fix="0 <= rank < world_size")
    return rank, world_size


class Dataset(torch.utils.data.Dataset[Any]):
    """Random access: `dataset[i]` is `(bytes, label)`, or `(transform(bytes), label)`.

    With `views=True` the bytes are a `memoryview` of the mapped shard instead of a copy (see
    `dlrig.pack.reader` on how long one lives): give a transform that reads it at once (a
    decoder), since a memoryview cannot be sent from a DataLoader worker to the main process.
    The DataLoader reads whole batches through `__getitems__`, which puts a batch's reads in
    flight together when the page cache is cold.
    """

    def __init__(
        self, dst: str | Path, transform: Transform | None = None, *, views: bool = False
    ) -> None:
        self.index = PackIndex(dst)
        self.reader = PackReader(self.index)
        self.transform = transform
        self.views = views
        self.label_map = self.index.label_map

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, sample: int) -> tuple[Any, int]:
        reader = self.reader
        data = reader.view(sample) if self.views else reader.get(sample)
        if self.transform is not None:
            return self.transform(data), self.index.labels[sample]
        return data, self.index.labels[sample]

    def __getitems__(self, samples: list[int]) -> list[tuple[Any, int]]:
        reader, labels, transform = self.reader, self.index.labels, self.transform
        if transform is None:
            batch = reader.view_many(samples) if self.views else reader.get_many(samples)
            return [(data, labels[s]) for data, s in zip(batch, samples, strict=True)]
        # One sample's bytes alive at a time: 64 copies of ~100 kB alive together would make
        # the allocator fault fresh pages in for every batch (~3x the cost of the copies).
        reader.will_read(samples)
        get = reader.view if self.views else reader.get
        return [(transform(get(s)), labels[s]) for s in samples]

    def name(self, sample: int) -> str:
        """The sample's name in the source (its path relative to SRC, or its number)."""
        return self.index.name(sample)


class IterableDataset(torch.utils.data.IterableDataset[Any]):
    """Streams `(bytes, label)` (or `(transform(bytes), label)`): each rank a disjoint slice,
    each DataLoader worker a disjoint part of it, no sample twice in an epoch.

    `batch_size` should be the DataLoader's: workers then take whole batches round-robin and
    the loader yields one deterministic order whatever the number of workers (see
    `dlrig.pack.order`). `rank`/`world_size` default to torch.distributed's (or the RANK and
    WORLD_SIZE variables torchrun sets). Under DDP pass `drop_last=True`, so every rank has the
    same number of samples and no rank waits in a collective for one that has finished.

    `views=True` yields memoryviews of the mapped shards instead of copies, as `Dataset`
    does (for a transform that decodes them in the worker). `readahead` (on by default) runs
    a thread per reading process that asks the kernel for the windows about to be read.
    """

    def __init__(
        self,
        dst: str | Path,
        *,
        batch_size: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = False,
        shuffle_window: int | None = None,
        transform: Transform | None = None,
        views: bool = False,
        readahead: bool = True,
    ) -> None:
        if batch_size < 1:
            raise InputError(f"batch_size {batch_size}", fix="a positive batch size")
        rank, world_size = _rank_and_world(rank, world_size)
        self.stream = Stream(
            PackIndex(dst),
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            rank=rank,
            world_size=world_size,
            drop_last=drop_last,
            shuffle_window=shuffle_window,
            readahead=readahead,
        )
        self.index = self.stream.index
        self.transform = transform
        self.views = views
        self.label_map = self.index.label_map
        # Epoch and start position, in shared memory: persistent DataLoader workers keep their
        # copy of the dataset between epochs, and still see a new epoch set here.
        self._position: Any = multiprocessing.RawArray("q", 2)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if multiprocessing.context.get_spawning_popen() is None:
            state["_position"] = list(self._position)  # a plain copy, e.g. for deepcopy
        return state

    def __len__(self) -> int:
        return len(self.stream)

    batch_size = property(lambda self: self.stream.batch_size)
    seed = property(lambda self: self.stream.seed)
    shuffle = property(lambda self: self.stream.shuffle)
    rank = property(lambda self: self.stream.rank)
    world_size = property(lambda self: self.stream.world_size)

    @property
    def epoch(self) -> int:
        return int(self._position[0])

    @property
    def start(self) -> int:
        return int(self._position[1])

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Read epoch `epoch` next, from position `start` of this rank's sequence."""
        if not 0 <= start <= len(self):
            raise InputError(f"start {start} outside 0..{len(self)}", fix="a position in the epoch")
        self._position[0], self._position[1] = epoch, start

    def sequence(self) -> Any:
        """This rank's sample numbers for the current epoch, in reading order."""
        return self.stream.sequence(self.epoch)

    def __iter__(self) -> Iterator[tuple[Any, int]]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return self.stream.samples(
            self.epoch, self.start, worker, workers, self.transform, views=self.views
        )


class StatefulLoader(torch.utils.data.DataLoader[Any]):
    """A DataLoader over an `IterableDataset` that knows where it is: `state_dict()` after any
    batch, `load_state_dict()` before iterating, and each full pass moves to the next epoch."""

    def __init__(self, dataset: IterableDataset, **kwargs: Any) -> None:
        batch_size = kwargs.pop("batch_size", dataset.batch_size)
        if batch_size != dataset.batch_size:
            raise InputError(
                f"StatefulLoader batch_size {batch_size} differs from the dataset's "
                f"{dataset.batch_size}",
                fix="give both the same batch size (the order depends on it)",
            )
        super().__init__(dataset, batch_size=batch_size, **kwargs)
        self.stream = dataset
        self._consumed = dataset.start

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        stream = self.stream
        total = len(stream)
        self._consumed = stream.start
        for batch in super().__iter__():
            self._consumed = min(total, self._consumed + stream.batch_size)
            yield batch
        stream.set_epoch(stream.epoch + 1)
        self._consumed = 0

    def state_dict(self) -> dict[str, Any]:
        stream = self.stream
        return {
            "epoch": stream.epoch,
            "position": self._consumed,
            "seed": stream.seed,
            "shuffle": stream.shuffle,
            "rank": stream.rank,
            "world_size": stream.world_size,
            "samples": len(stream.index),
            "batch_size": stream.batch_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        stream = self.stream
        expected = {
            "seed": stream.seed,
            "shuffle": stream.shuffle,
            "world_size": stream.world_size,
            "samples": len(stream.index),
            "batch_size": stream.batch_size,
        }
        differs = [k for k, v in expected.items() if state.get(k) != v]
        if differs:
            raise InputError(
                f"the saved loader state differs in {', '.join(differs)}",
                fix="resume with the same dataset, seed, world size and batch size",
            )
        stream.set_epoch(int(state["epoch"]), int(state["position"]))
        self._consumed = int(state["position"])

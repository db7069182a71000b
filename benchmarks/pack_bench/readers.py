"""Each format's reader, as its documentation says to read it (runs in the child process).

Every row reads through a torch DataLoader with batch_size=64 (num_workers=0 for "1
process", N for N workers) whose collate returns counts only, so IPC is not what is measured.
Each sample goes through the same consumer, in the reading process:

- raw: `touch`, which reads one byte of every 4 KiB page of the sample. For a copying API
  the copy has already read every byte; for a zero-copy API (a view into a mapping) this is
  what makes the pages come off the disk, so a lazy map cannot skip the I/O it claims.
- decode: Pillow decodes the JPEG to RGB (the same function for every format).

API kinds: "copy" rows hand the consumer a new object per sample (bytes, or a numpy array
for h5py); "view" rows a buffer into a mapping that is not copied. Only dlrig and LMDB
document a view API (dlrig's `views=True`, LMDB's `buffers=True`); the others have none.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pack_bench import BATCH
from pack_bench.writers import listing

PAGE = 4096
SUBSET = 20  # the subset case reads 1/SUBSET of the samples, at random


@dataclass(frozen=True)
class Row:
    name: str
    store: str  # folder under formats/ ("" for the loose files)
    api: str  # copy | view
    style: str  # map (a sampler gives the order) | iterable (the dataset orders itself)
    venv: str | None  # benchmark venv it runs in (None: the dev venv)
    how: str  # what is called, for the legend
    raw_only: bool = False


ROWS = (
    Row("loose", "", "copy", "map", None, "open(path).readall(), one file a sample"),
    Row("dlrig-map", "dlrig", "copy", "map", None,
        "dlrig.pack.Dataset (bytes; DataLoader batches via __getitems__)"),
    Row("dlrig-stream", "dlrig", "copy", "iterable", None,
        "dlrig.pack.IterableDataset(batch_size=64) (bytes)"),
    Row("dlrig-map-views", "dlrig", "view", "map", None,
        "dlrig.pack.Dataset(views=True) (memoryview of the shard map)", raw_only=True),
    Row("dlrig-stream-views", "dlrig", "view", "iterable", None,
        "dlrig.pack.IterableDataset(views=True)", raw_only=True),
    Row("lmdb", "lmdb", "copy", "map", None,
        "txn.get (readonly, lock=False; readahead on for sequential only)"),
    Row("lmdb-buffers", "lmdb", "view", "map", None,
        "env.begin(buffers=True): txn.get gives a buffer into LMDB's map", raw_only=True),
    Row("hdf5", "hdf5", "copy", "map", None, "h5py: one uint8 dataset + offsets, data[a:b]"),
    Row("hdf5-vlen", "hdf5-vlen", "copy", "map", None, "h5py: vlen uint8 dataset, images[i]"),
    Row("webdataset", "webdataset", "copy", "iterable", "anchors",
        "wds.WebDataset (shuffled: shardshuffle=100 + .shuffle(1000))"),
    Row("litdata", "litdata", "copy", "iterable", "anchors",
        "litdata.StreamingDataset(shuffle=...) on the local folder"),
    Row("mds", "mds", "copy", "iterable", "mds", "streaming.StreamingDataset(local=...)"),
)  # fmt: skip
BY_NAME = {row.name: row for row in ROWS}


def touch(data: Any) -> int:
    view = memoryview(data)
    view[::PAGE].tobytes()
    return view.nbytes


def decode(data: Any) -> int:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        image.convert("RGB")
    return memoryview(data).nbytes


def consumer(stage: str) -> Any:
    return decode if stage == "decode" else touch


def collate(batch: list[Any]) -> tuple[int, int]:
    return len(batch), sum(b[0] if isinstance(b, tuple) else b for b in batch)


def loose_order(work: Path) -> list[int]:
    """Loose files read sequentially go in directory order (what `ls -R` gives, the
    friendliest to a disk), not in the packs' order."""
    paths = [p for p, _ in listing(work)]
    return sorted(range(len(paths)), key=paths.__getitem__)


def map_order(length: int, order: str) -> list[int]:
    """Sample numbers a map-style reader is asked for: all in storage order, all in a seeded
    permutation, or (subset) a random twentieth of them, as one epoch over a dataset twenty
    times larger would touch them."""
    if order == "subset":
        return random.Random(1).sample(range(length), max(1, length // SUBSET))
    positions = list(range(length))
    if order == "shuffled":
        random.Random(1).shuffle(positions)
    return positions


class MapSource:
    """Random access by sample number for the formats without their own torch Dataset;
    opened lazily in each process (LMDB and HDF5 handles must not cross a fork)."""

    def __init__(self, row: Row, work: Path, order: str, stage: str) -> None:
        self.row, self.work, self.order = row, work, order
        self.fn = consumer(stage)
        self.get: Any = None
        self.handles: list[Any] = []
        self.length = len(listing(work))

    def __len__(self) -> int:
        return self.length

    def open(self) -> None:
        self.get = self._open()

    def _open(self) -> Any:
        where = self.work / "formats" / self.row.store
        if self.row.name == "loose":
            paths = [p for p, _ in listing(self.work)]
            from pack_bench.writers import read_file

            return lambda i: read_file(paths[i])
        if self.row.store == "lmdb":
            import lmdb

            env = lmdb.open(
                str(where), readonly=True, lock=False, readahead=self.order == "sequential"
            )
            txn = env.begin(buffers=self.row.api == "view")
            self.handles += [txn, env]
            return lambda i: txn.get(b"%09d" % i)
        import h5py

        h5 = h5py.File(where / "data.h5", "r")
        self.handles.append(h5)
        if self.row.name == "hdf5":
            data, offsets = h5["data"], h5["offsets"][:].tolist()
            return lambda i: data[offsets[i] : offsets[i + 1]]
        images = h5["images"]
        return lambda i: images[i]

    def __getitem__(self, number: int) -> int:
        if self.get is None:
            self.open()
        return self.fn(self.get(number))  # type: ignore[no-any-return]

    def close(self) -> None:
        for handle in self.handles:
            handle.abort() if hasattr(handle, "abort") else handle.close()
        self.handles, self.get = [], None


def build(row: Row, work: Path, order: str, stage: str) -> tuple[Any, list[int] | None]:
    """(dataset, sampler or None) for one case."""
    where = work / "formats" / row.store
    shuffled = order == "shuffled"
    fn = consumer(stage)
    views = row.api == "view"
    if row.name.startswith("dlrig-map"):
        from dlrig.pack import Dataset

        return Dataset(where, transform=fn, views=views), map_order(len(listing(work)), order)
    if row.name.startswith("dlrig-stream"):
        from dlrig.pack import IterableDataset

        stream = IterableDataset(
            where, batch_size=BATCH, shuffle=shuffled, seed=1, transform=fn, views=views
        )
        return stream, None
    if row.style == "map":
        source = MapSource(row, work, order, stage)
        if row.name == "loose" and order == "sequential":
            return source, loose_order(work)
        return source, map_order(len(source), order)
    return _iterable(row, where, shuffled, fn), None


def _iterable(row: Row, where: Path, shuffled: bool, fn: Any) -> Any:
    if row.name == "webdataset":
        import webdataset as wds

        urls = sorted(str(p) for p in where.glob("*.tar"))
        dataset = wds.WebDataset(urls, shardshuffle=100 if shuffled else False, empty_check=False)
        if shuffled:
            dataset = dataset.shuffle(1000)
        return dataset.map(lambda sample: fn(sample["jpg"]))
    if row.name == "litdata":
        import litdata

        class Litdata(litdata.StreamingDataset):  # type: ignore[misc]
            def __getitem__(self, index: Any) -> int:
                return fn(super().__getitem__(index)["image"])  # type: ignore[no-any-return]

        # A plain path is read in place ("local:" would copy every chunk into a cache first).
        return Litdata(str(where), shuffle=shuffled, seed=1)
    from streaming import StreamingDataset

    class Mds(StreamingDataset):  # type: ignore[misc]
        def __getitem__(self, index: int) -> int:
            return fn(super().__getitem__(index)["image"])  # type: ignore[no-any-return]

    return Mds(local=str(where), shuffle=shuffled, shuffle_seed=1, batch_size=BATCH)


def close(dataset: Any) -> None:
    if isinstance(dataset, MapSource):
        dataset.close()
    elif hasattr(dataset, "reader"):  # dlrig Dataset
        dataset.reader.close()
    elif hasattr(dataset, "stream") and hasattr(dataset.stream, "reader"):
        dataset.stream.reader.close()

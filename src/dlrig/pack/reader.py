"""Reading a dlrig pack without torch: the whole index in a few compact arrays, the shards
memory-mapped, one sample a slice.

Per-sample cost is what matters once the data is packed (several formats read at hundreds of
thousands of samples a second; Python work per sample decides which): `get(i)` is three array
lookups and one slice of a memory map, no syscall once the pages are cached. The arrays are
`array.array`s, not lists (8 bytes a number, and forked DataLoader workers do not copy them by
touching reference counts) nor numpy (indexing numpy returns numpy scalars, ~5x slower here).

Two ways to get a sample:

- `get(i)` -> `bytes`, a copy (the default everywhere: safe to keep, pickle, send to another
  process). The copy is most of its cost: ~4 us for a 44 kB JPEG here, of ~5 us in all.
- `view(i)` -> `memoryview` of the mapped shard, no copy (~0.3 us). It stays valid as long as
  it exists: a shard with views alive is never unmapped (closing the reader, or evicting the
  shard past the open-file budget, leaves that map to be released with its last view). Hand
  views to code that reads them at once (a decoder, `torch.frombuffer`, `np.frombuffer`);
  they cannot be pickled, so they do not cross to a DataLoader's main process, and each one
  kept pins its shard's file descriptor and mapping.

`get_many` / `view_many` read a batch (what `Dataset.__getitems__` gives the DataLoader): when
a few probed samples of it are not in the page cache, the batch's byte ranges are first
handed to the kernel together (WILLNEED), so a shuffled batch is many reads in flight at
once instead of one page fault after another (on a big dataset, where the kernel's mmap
read-around gives up, one 4 KiB page at a time).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import resource
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from dlrig.errors import InputError
from dlrig.pack import destination
from dlrig.pack.format import FORMAT_NAME, SHARDS, ShardEntry, read_index
from dlrig.pack.readahead import CHUNK_BYTES, cached, fill

_PAGE = mmap.PAGESIZE
_SPARE_FDS = 64
_PROBES = 4  # samples of a batch probed for residency before deciding to advise it
_GAP_BYTES = 16 << 10  # ranges this close are read as one
_READ_RUN_BYTES = 256 << 10  # a merged run at least this long is read, not advised


class PackIndex:
    """The manifest and every shard's bounds and labels, as flat arrays over all samples."""

    def __init__(self, dst: str | Path) -> None:
        self.root = Path(dst)
        manifest = destination.read_manifest(self.root)
        if manifest.get("format") != FORMAT_NAME:
            raise InputError(
                f"{dst}: not a dlrig pack manifest", fix="give a folder `dlrig pack` wrote"
            )
        self.data_format = str(manifest.get("data_format", "dlrig"))
        self.manifest = manifest
        raw_shards = manifest.get("shards")
        assert isinstance(raw_shards, list)
        self.shards = [ShardEntry.from_dict(s) for s in raw_shards]
        labels = manifest.get("labels")
        self.label_map: dict[str, int] | None = labels if isinstance(labels, dict) else None
        self.starts: array[int] = array("Q")
        self.ends: array[int] = array("Q")
        self.shard_of: array[int] = array("I")
        self.labels: array[int] = array("q")
        for number, shard in enumerate(self.shards):
            index = read_index(self.root / SHARDS / f"{shard.name}.idx", names=False)
            if index.count != shard.samples:
                raise InputError(
                    f"{self.root / SHARDS / shard.name}.idx: holds {index.count} samples, the "
                    f"manifest says {shard.samples}",
                    fix=f"run `dlrig pack verify {dst}`",
                )
            self.starts.extend(index.offsets[:-1])
            self.ends.extend(index.offsets[1:])
            self.shard_of.extend(array("I", [number]) * index.count)
            self.labels.extend(index.labels)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def shard_counts(self) -> list[int]:
        return [s.samples for s in self.shards]

    def name(self, sample: int) -> str:
        shard = self.shards[self.shard_of[sample]]
        index = read_index(self.root / SHARDS / f"{shard.name}.idx", names=True)
        return index.name(sample - shard.first_sample)

    def data_path(self, shard: int) -> Path:
        return self.root / SHARDS / f"{self.shards[shard].name}.bin"


def _fd_budget(shards: int) -> int:
    """How many shards may be mapped at once (two descriptors each: the map's own, and the
    one probes read through): raise the soft open-file limit if needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * shards + _SPARE_FDS + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return shards
    return max(16, min(shards, (soft - _SPARE_FDS - 256) // 2))


class PackReader:
    """Sample bytes by number. Shards are mapped on first use in each process (after a fork
    the parent's maps are shared, not copied); past the open-file budget the oldest map is
    closed."""

    def __init__(self, index: PackIndex) -> None:
        if index.data_format != "dlrig":
            raise InputError(
                f"{index.root}: is packed as {index.data_format}, which dlrig's reader does not "
                "read",
                fix=f"read it with the {index.data_format} library, or repack with --format dlrig",
            )
        self.index = index
        # Bound here so each read is local lookups, not attribute chains through the index.
        self.starts, self.ends, self.shard_of = index.starts, index.ends, index.shard_of
        self._maps: list[Any] = [None] * len(index.shards)
        self._views: list[memoryview | None] = [None] * len(index.shards)
        self._fds: list[int] = [-1] * len(index.shards)
        self._open: list[int] = []
        self._budget = 0

    def __getstate__(self) -> dict[str, Any]:
        # Maps do not travel to spawned processes: each opens its own.
        state = dict(self.__dict__)
        state["_maps"] = [None] * len(self.index.shards)
        state["_views"] = [None] * len(self.index.shards)
        state["_fds"] = [-1] * len(self.index.shards)
        state["_open"] = []
        return state

    def _map(self, shard: int) -> Any:
        if not self._budget:
            self._budget = _fd_budget(len(self._maps))
        if len(self._open) >= self._budget:
            self._unmap(self._open.pop(0))
        path = self.index.data_path(shard)
        if self.index.shards[shard].data_bytes == 0:
            mapped: Any = b""
        else:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                size = os.fstat(fd).st_size
                expected = self.index.shards[shard].data_bytes
                if size < expected:
                    # A shard cut short (a copy or download that stopped) would hand out empty
                    # or short samples without a word: a training run must stop here instead.
                    raise InputError(
                        f"{path}: shard {shard} is truncated ({size:,} of {expected:,} bytes)",
                        fix=f"copy the pack again, or check it: dlrig pack verify {self.index.root}",
                    )
                mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            except BaseException:
                os.close(fd)
                raise
            self._fds[shard] = fd
        self._maps[shard] = mapped
        self._views[shard] = memoryview(mapped)
        self._open.append(shard)
        return mapped

    def _view(self, shard: int) -> memoryview:
        self._map(shard)
        return self._views[shard]  # type: ignore[return-value]

    def _unmap(self, shard: int) -> None:
        mapped, view, fd = self._maps[shard], self._views[shard], self._fds[shard]
        self._maps[shard] = self._views[shard] = None
        self._fds[shard] = -1
        if fd >= 0:
            os.close(fd)
        if view is not None:
            view.release()
        # A view handed out still holds the map: it is unmapped when the last one goes.
        with contextlib.suppress(BufferError, AttributeError):
            mapped.close()

    def get(self, sample: int) -> bytes:
        """Sample `sample`'s bytes (a copy)."""
        shard = self.shard_of[sample]
        mapped = self._maps[shard]
        if mapped is None:
            mapped = self._map(shard)
        return mapped[self.starts[sample] : self.ends[sample]]  # type: ignore[no-any-return]

    def view(self, sample: int) -> memoryview:
        """Sample `sample`'s bytes without a copy (see the module's note on a view's life)."""
        shard = self.shard_of[sample]
        view = self._views[shard]
        if view is None:
            view = self._view(shard)
        return view[self.starts[sample] : self.ends[sample]]

    def get_many(self, samples: Sequence[int]) -> list[bytes]:
        """`[get(i) for i in samples]`, with the batch's reads put in flight first when the
        cache looks cold (`will_read`)."""
        return self._many(samples, self._maps, self._map)

    def view_many(self, samples: Sequence[int]) -> list[memoryview]:
        """`[view(i) for i in samples]`, with the same cold-cache batching as `get_many`."""
        return self._many(samples, self._views, self._view)

    def _many(
        self, samples: Sequence[int], maps: list[Any], fetch: Callable[[int], Any]
    ) -> list[Any]:
        """One slice per sample out of `maps` (the maps, or their views), each shard opened
        with `fetch` on first use."""
        self.will_read(samples)
        starts, ends, shard_of = self.starts, self.ends, self.shard_of
        out = []
        for sample in samples:
            mapped = maps[shard_of[sample]]
            if mapped is None:
                mapped = fetch(shard_of[sample])
            out.append(mapped[starts[sample] : ends[sample]])
        return out

    def will_read(self, samples: Sequence[int]) -> None:
        """These samples are read next: when a few probed ones are not in the page cache, all
        their byte ranges are advised at once (`advise`)."""
        # Advice costs ~3 us a sample even when every page is cached, about a warm read's
        # cost: it is given only when one of a few probed samples is not cached (a probe is
        # one non-blocking 1-byte read, ~2 us; a sample's pages are cached or not together).
        if not samples:
            return
        step = max(1, len(samples) // _PROBES)
        for sample in samples[::step][:_PROBES]:
            shard = self.shard_of[sample]
            if self._maps[shard] is None:
                self._map(shard)
            fd = self._fds[shard]
            if fd >= 0 and cached(fd, self.starts[sample]) is False:
                self.advise(samples)
                return

    def advise(self, samples: Iterable[int]) -> None:
        """Bring these samples' pages into the page cache, their byte ranges merged where they
        (nearly) touch: the scattered ones are advised (WILLNEED) first, so they are read in
        the background together, then runs of at least `_READ_RUN_BYTES` are read through
        (`readahead.fill`) before this returns."""
        spans: dict[int, list[tuple[int, int]]] = {}
        starts, ends, shard_of = self.starts, self.ends, self.shard_of
        for sample in samples:
            spans.setdefault(shard_of[sample], []).append((starts[sample], ends[sample]))
        reads: list[tuple[int, int, int]] = []
        for shard, ranges in spans.items():
            mapped = self._maps[shard]
            if mapped is None:
                mapped = self._map(shard)
            if not isinstance(mapped, mmap.mmap):
                continue
            for low, high in _merged(ranges):
                if high - low >= _READ_RUN_BYTES:
                    reads.append((self._fds[shard], low, high))
                else:
                    _willneed(mapped, low, high)
        # Read through the page cache's read path (`fill`): the kernel's sequential readahead
        # then keeps reading past this batch while its samples are used, and leaves large
        # folios, which the map faults in cheaply (WILLNEED leaves 4 KiB pages).
        with contextlib.suppress(OSError):
            for fd, low, high in reads:
                fill(fd, low, high)

    def close(self) -> None:
        for shard in list(self._open):
            self._unmap(shard)
        self._open = []


def _merged(ranges: list[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """Sorted byte ranges with those closer than `_GAP_BYTES` merged (reading a small gap
    costs less than another I/O)."""
    ranges.sort()
    low, high = ranges[0]
    for start, stop in ranges[1:]:
        if start <= high + _GAP_BYTES:
            high = max(high, stop)
        else:
            yield low, high
            low, high = start, stop
    yield low, high


def _willneed(mapped: mmap.mmap, start: int, stop: int) -> None:
    aligned = start - start % _PAGE
    stop = min(stop, len(mapped))
    with contextlib.suppress(OSError, ValueError):
        for offset in range(aligned, stop, CHUNK_BYTES):
            mapped.madvise(mmap.MADV_WILLNEED, offset, min(CHUNK_BYTES, stop - offset))

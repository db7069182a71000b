"""Reading a dlrig pack without torch: the whole index in a few compact arrays, the shards
memory-mapped, one sample a slice.

Per-sample cost is what matters once the data is packed (several formats read at hundreds of
thousands of samples a second; Python work per sample decides which): `get(i)` is four array
lookups and one slice of a memory map, no syscall once the pages are cached. The arrays are
`array.array`s, not lists (8 bytes a number, and forked DataLoader workers do not copy them by
touching reference counts) nor numpy (indexing numpy returns numpy scalars, ~5× slower here).
"""

from __future__ import annotations

import contextlib
import mmap
import resource
from array import array
from pathlib import Path
from typing import Any

from dlrig.errors import InputError
from dlrig.pack import destination
from dlrig.pack.format import FORMAT_NAME, SHARDS, ShardEntry, read_index

_PAGE = mmap.PAGESIZE
_SPARE_FDS = 64


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
    """How many shards may be mapped at once: raise the soft open-file limit if needed."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = shards + _SPARE_FDS + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return shards
    return max(16, min(shards, soft - _SPARE_FDS - 256))


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
        self._maps: list[Any] = [None] * len(index.shards)
        self._open: list[int] = []
        self._budget = 0

    def __getstate__(self) -> dict[str, Any]:
        # Maps do not travel to spawned processes: each opens its own.
        state = dict(self.__dict__)
        state["_maps"] = [None] * len(self.index.shards)
        state["_open"] = []
        return state

    def _map(self, shard: int) -> Any:
        if not self._budget:
            self._budget = _fd_budget(len(self._maps))
        if len(self._open) >= self._budget:
            oldest = self._open.pop(0)
            evicted, self._maps[oldest] = self._maps[oldest], None
            with contextlib.suppress(BufferError, AttributeError):
                evicted.close()
        path = self.index.data_path(shard)
        if self.index.shards[shard].data_bytes == 0:
            view: Any = b""
        else:
            with open(path, "rb") as stream:
                view = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ)
        self._maps[shard] = view
        self._open.append(shard)
        return view

    def get(self, sample: int) -> bytes:
        shard = self.index.shard_of[sample]
        view = self._maps[shard]
        if view is None:
            view = self._map(shard)
        return view[self.index.starts[sample] : self.index.ends[sample]]  # type: ignore[no-any-return]

    def prefetch(self, shard: int, start: int, stop: int) -> None:
        """Ask the kernel to read a byte range ahead (async readahead of a whole window,
        so reads inside it are page-cache hits even in shuffled order)."""
        view = self._maps[shard]
        if view is None:
            view = self._map(shard)
        if isinstance(view, mmap.mmap) and stop > start:
            aligned = start - start % _PAGE
            with contextlib.suppress(OSError, ValueError, AttributeError):
                view.madvise(mmap.MADV_WILLNEED, aligned, min(len(view), stop) - aligned)

    def close(self) -> None:
        for view in self._maps:
            if isinstance(view, mmap.mmap):
                with contextlib.suppress(BufferError):
                    view.close()
        self._maps = [None] * len(self._maps)
        self._open = []

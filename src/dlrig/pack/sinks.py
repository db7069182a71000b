"""One shard's data file in each output format, written to a temporary name and renamed into
place only when whole (so a file under its final name is always complete).

- dlrig: the samples back to back in `shard-NNNNN.bin`;
- webdataset: a POSIX tar `shard-NNNNN.tar` in WebDataset's naming convention: members
  `KEY.EXT` (the sample's own extension) and `KEY.cls` (the label as text), KEY without dots;
- hdf5: `shard-NNNNN.h5` with a uint8 `data` blob, `offsets` (uint64, count + 1) and `labels`
  (int64), one file per shard so shards are written in parallel and a killed writer cannot
  damage the others (HDF5 has no journal);
- lmdb: written as a dlrig shard first, then moved into the one LMDB database by the parent
  process (LMDB allows one writer), see `dlrig.pack.lmdb_target`.
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
from pathlib import Path
from typing import BinaryIO, Protocol

from dlrig.errors import MissingExtraError
from dlrig.pack.format import DATA_SUFFIX, ShardIndex

_WRITE_BUFFER = 8 << 20


class Sink(Protocol):
    def add(self, data: bytes, key: str, ext: str, label: int) -> None: ...

    def finish(self, index: ShardIndex) -> int:
        """Make the data file durable under its final name; returns its size in bytes."""
        ...

    def abort(self) -> None: ...


def _fsync_and_rename(stream: BinaryIO, temporary: Path, final: Path) -> int:
    stream.flush()
    os.fsync(stream.fileno())
    size = os.fstat(stream.fileno()).st_size
    stream.close()
    os.replace(temporary, final)
    return size


class BinSink:
    def __init__(self, final: Path) -> None:
        self.final = final
        self.temporary = final.with_name(final.name + ".tmp")
        self.stream: BinaryIO = open(self.temporary, "wb", buffering=_WRITE_BUFFER)  # noqa: SIM115

    def add(self, data: bytes, key: str, ext: str, label: int) -> None:
        self.stream.write(data)

    def finish(self, index: ShardIndex) -> int:
        return _fsync_and_rename(self.stream, self.temporary, self.final)

    def abort(self) -> None:
        with contextlib.suppress(OSError):
            self.stream.close()
        with contextlib.suppress(OSError):
            self.temporary.unlink()


class TarSink(BinSink):
    """WebDataset shards: what `webdataset.TarWriter` writes, with fixed metadata so the same
    input gives the same bytes."""

    def __init__(self, final: Path) -> None:
        super().__init__(final)
        self.tar = tarfile.open(fileobj=self.stream, mode="w", format=tarfile.USTAR_FORMAT)  # noqa: SIM115

    def _member(self, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o444
        info.mtime = 0
        self.tar.addfile(info, io.BytesIO(data))

    def add(self, data: bytes, key: str, ext: str, label: int) -> None:
        self._member(f"{key}.{ext}", data)
        if label >= 0:
            self._member(f"{key}.cls", str(label).encode())

    def finish(self, index: ShardIndex) -> int:
        self.tar.close()  # writes the end-of-archive blocks; leaves self.stream open
        return _fsync_and_rename(self.stream, self.temporary, self.final)


class Hdf5Sink(BinSink):
    """Samples stream into a temporary blob; `finish` copies it into the HDF5 file."""

    def __init__(self, final: Path) -> None:
        try:
            import h5py  # type: ignore[import-untyped]  # noqa: F401
        except ImportError:
            raise MissingExtraError("h5py", "pack", "--format hdf5") from None
        super().__init__(final.with_suffix(".blob"))
        self.h5_final = final

    def finish(self, index: ShardIndex) -> int:
        import h5py
        import numpy as np

        self.stream.flush()
        blob = self.temporary
        temporary = self.h5_final.with_name(self.h5_final.name + ".tmp")
        try:
            size = index.data_bytes
            with h5py.File(temporary, "w") as h5:
                data = h5.create_dataset("data", shape=(size,), dtype=np.uint8)
                with open(blob, "rb") as stream:
                    at = 0
                    while at < size:
                        chunk = stream.read(64 << 20)
                        data[at : at + len(chunk)] = np.frombuffer(chunk, dtype=np.uint8)
                        at += len(chunk)
                h5.create_dataset("offsets", data=np.asarray(index.offsets, dtype=np.uint64))
                h5.create_dataset("labels", data=np.asarray(index.labels, dtype=np.int64))
            with open(temporary, "rb+") as stream:
                return _fsync_and_rename(stream, temporary, self.h5_final)
        finally:
            self.stream.close()
            with contextlib.suppress(OSError):
                blob.unlink()
            with contextlib.suppress(OSError):
                temporary.unlink()


def open_sink(fmt: str, shards_dir: Path, name: str) -> Sink:
    suffix = DATA_SUFFIX[fmt] or ".bin"  # lmdb stages a dlrig shard
    final = shards_dir / f"{name}{suffix}"
    if fmt == "webdataset":
        return TarSink(final)
    if fmt == "hdf5":
        return Hdf5Sink(final)
    return BinSink(final)


def extension_of(name: str) -> str:
    """The member extension WebDataset decodes by: the sample's own suffix, or `bin`."""
    suffix = os.path.splitext(name)[1].lower().lstrip(".")
    return suffix if suffix and suffix.isalnum() else "bin"

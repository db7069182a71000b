"""`dlrig pack verify DST`: re-read every byte and check it against the checksums.

Per shard: the index's BLAKE2b against the manifest, the data file's size against the index,
then every sample's CRC-32 against the index (through each format's own reader for
webdataset, HDF5 and LMDB packs). A damaged sample is named by its name in the source.
Shards are checked in parallel threads: the CRC runs on memoryview slices of a memory map
with the GIL released, so page faults and hashing overlap across cores.
"""

from __future__ import annotations

import mmap
import tarfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrig.errors import InputError
from dlrig.pack import destination, lmdb_target
from dlrig.pack.format import (
    FORMAT_NAME,
    SHARDS,
    BadIndex,
    ShardEntry,
    ShardIndex,
    decode_index,
    index_digest,
)
from dlrig.pack.writer import usable_cores
from dlrig.report import envelope

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Damage:
    shard: str
    problem: str
    sample: int | None = None  # global sample number
    name: str | None = None  # the sample's name in the source

    def to_dict(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "sample": self.sample,
            "name": self.name,
            "problem": self.problem,
        }

    def line(self) -> str:
        if self.name is not None:
            return f"{self.name} (sample {self.sample}, {self.shard}): {self.problem}"
        return f"{self.shard}: {self.problem}"


@dataclass
class VerifyReport:
    dst: str
    data_format: str
    shards: int
    samples: int
    samples_checked: int
    data_bytes: int
    seconds: float
    damage: list[Damage] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.damage

    def to_dict(self) -> dict[str, Any]:
        return envelope(
            "dlrig.pack",
            1,
            {
                "command": "verify",
                "dst": self.dst,
                "format": self.data_format,
                "ok": self.ok,
                "shards": self.shards,
                "samples": self.samples,
                "samples_checked": self.samples_checked,
                "data_bytes": self.data_bytes,
                "seconds": round(self.seconds, 3),
                "damaged": [d.to_dict() for d in self.damage],
            },
        )


def verify(
    dst: str | Path, jobs: int | None = None, progress: Progress | None = None
) -> VerifyReport:
    """Re-read every shard of the pack at `dst` against its manifest's sizes and checksums
    (`dlrig pack --verify DST`); `report.damage` lists what does not match."""
    root = Path(dst)
    manifest = destination.read_manifest(root)
    if manifest.get("format") != FORMAT_NAME:
        raise InputError(
            f"{root}: not a dlrig pack manifest", fix="give a folder `dlrig pack` wrote"
        )
    fmt = str(manifest.get("data_format", "dlrig"))
    raw_shards = manifest.get("shards")
    if not isinstance(raw_shards, list):
        raise InputError(f"{root}/manifest.json: lists no shards", fix="repack the dataset")
    shards = [ShardEntry.from_dict(s) for s in raw_shards]
    started = time.perf_counter()
    checker = _checker(fmt, root)
    total = sum(s.samples for s in shards)
    done = 0
    damage: list[Damage] = []
    checked = 0
    try:
        with ThreadPoolExecutor(max_workers=max(1, jobs or usable_cores())) as pool:
            for found, count in pool.map(checker, shards):
                damage += found
                checked += count
                done += count
                if progress is not None:
                    progress(done, total)
    finally:
        with _ENVS_LOCK:
            env = _ENVS.pop(str(root), None)
        if env is not None:
            env.close()
    return VerifyReport(
        str(root),
        fmt,
        len(shards),
        total,
        checked,
        sum(s.data_bytes for s in shards),
        time.perf_counter() - started,
        damage,
    )


def _checker(fmt: str, root: Path) -> Callable[[ShardEntry], tuple[list[Damage], int]]:
    def check(shard: ShardEntry) -> tuple[list[Damage], int]:
        index, damage = _load_index(root, shard)
        if index is None:
            return damage, 0
        notes: list[str] = []
        samples = _samples(fmt, root, shard, index, notes)
        checked = 0
        try:
            for data, position in zip(samples, range(index.count), strict=False):
                checked += 1
                if data is None:
                    damage.append(
                        _sample(shard, index, position, "missing (the data file is cut short)")
                    )
                elif zlib.crc32(data) != index.crcs[position]:
                    damage.append(
                        _sample(shard, index, position, "checksum mismatch (damaged bytes)")
                    )
                elif len(data) == 0:
                    # Packed before `pack` refused empty files: intact bytes, nothing to decode.
                    damage.append(_sample(shard, index, position, "empty (0 bytes)"))
        except _ShardUnreadable as exc:
            damage.append(Damage(shard.name, str(exc)))
            return damage, checked
        except Exception as exc:  # noqa: BLE001 - a damaged file makes its library raise anything
            damage.append(Damage(shard.name, f"unreadable: {type(exc).__name__}: {exc}"))
            return damage, checked
        for position in range(checked, index.count):
            damage.append(_sample(shard, index, position, "missing from the data file"))
        damage += [Damage(shard.name, note) for note in notes]
        return damage, checked

    return check


def _sample(shard: ShardEntry, index: ShardIndex, position: int, problem: str) -> Damage:
    return Damage(shard.name, problem, shard.first_sample + position, index.name(position))


def _load_index(root: Path, shard: ShardEntry) -> tuple[ShardIndex | None, list[Damage]]:
    path = root / SHARDS / f"{shard.name}.idx"
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, [Damage(shard.name, f"index {path.name} cannot be read ({exc.strerror})")]
    problems = []
    if index_digest(raw) != shard.index_blake2b:
        problems.append(Damage(shard.name, f"index {path.name} is damaged (checksum mismatch)"))
    try:
        index = decode_index(raw, path.name)
    except (BadIndex, ValueError, UnicodeDecodeError) as exc:
        return None, [*problems, Damage(shard.name, f"index unreadable: {exc}")]
    if index.count != shard.samples or index.data_bytes != shard.data_bytes:
        problems.append(Damage(shard.name, "index does not match the manifest's counts"))
    return index, problems


class _ShardUnreadable(Exception):
    pass


def _samples(
    fmt: str, root: Path, shard: ShardEntry, index: ShardIndex, notes: list[str]
) -> Iterator[Any]:
    shards = root / SHARDS
    if fmt == "dlrig":
        return _bin_samples(shards / f"{shard.name}.bin", index, notes)
    if fmt == "webdataset":
        return _tar_samples(shards / f"{shard.name}.tar", index)
    if fmt == "hdf5":
        return _h5_samples(shards / f"{shard.name}.h5", index)
    return _lmdb_samples(root, shard, index)


def _bin_samples(path: Path, index: ShardIndex, notes: list[str]) -> Iterator[Any]:
    try:
        stream = open(path, "rb")  # noqa: SIM115 - closed in finally below
    except OSError as exc:
        raise _ShardUnreadable(f"data file {path.name} cannot be read ({exc.strerror})") from None
    try:
        size = stream.seek(0, 2)
        if size != index.data_bytes:
            notes.append(
                f"data file {path.name} is {size} bytes, the index says {index.data_bytes}"
                + (" (cut short)" if size < index.data_bytes else "")
            )
        view = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        whole = memoryview(view)
        offsets = index.offsets
        try:
            for position in range(index.count):
                if offsets[position + 1] > size:
                    yield None  # beyond the end of a cut-short file
                    continue
                part = whole[offsets[position] : offsets[position + 1]]
                yield part
                part.release()
        finally:
            whole.release()
            if isinstance(view, mmap.mmap):
                view.close()
    finally:
        stream.close()


def _tar_samples(path: Path, index: ShardIndex) -> Iterator[Any]:
    try:
        archive = tarfile.open(path, "r:")  # noqa: SIM115
    except (OSError, tarfile.TarError) as exc:
        raise _ShardUnreadable(f"tar {path.name} cannot be read ({exc})") from None
    with archive:
        try:
            for member in archive:
                if member.name.endswith(".cls"):
                    continue
                handle = archive.extractfile(member)
                yield None if handle is None else handle.read()
        except (OSError, tarfile.TarError) as exc:
            raise _ShardUnreadable(f"tar {path.name} is damaged ({exc})") from None


def _h5_samples(path: Path, index: ShardIndex) -> Iterator[Any]:
    import h5py  # type: ignore[import-untyped]

    try:
        h5 = h5py.File(path, "r")
    except OSError as exc:
        raise _ShardUnreadable(f"HDF5 {path.name} cannot be read ({exc})") from None
    with h5:
        data = h5["data"]
        offsets = index.offsets
        for position in range(index.count):
            yield data[offsets[position] : offsets[position + 1]].tobytes()


_ENVS: dict[str, Any] = {}
_ENVS_LOCK = threading.Lock()


def _lmdb_samples(root: Path, shard: ShardEntry, index: ShardIndex) -> Iterator[Any]:
    # One environment per process and database (LMDB's rule); a read transaction per thread.
    with _ENVS_LOCK:
        env = _ENVS.get(str(root))
        if env is None:
            env = _ENVS[str(root)] = lmdb_target.open_env(root, readonly=True)
    with env.begin(buffers=True) as txn:
        for position in range(index.count):
            yield txn.get(lmdb_target.key(shard.first_sample + position))

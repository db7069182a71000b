"""`--format lmdb`: one LMDB database, `DST/data.mdb`, keyed by sample number.

Keys: `b"%09d" % n` -> the sample's original bytes; `b"__len__"` -> the count as ASCII;
`b"__labels__"` -> every label as int64 little-endian. LMDB allows a single writer, so the
workers stage each shard as a dlrig `.bin` + `.idx`; once all are staged the parent moves them
into the database one transaction per shard, each with a marker key committed with the data
(`__dlrig_shard__/shard-NNNNN`): a shard is in the database exactly when its marker is. The
`.idx` files stay as the sidecar `verify` checks the values against.
"""

from __future__ import annotations

import contextlib
import json
import mmap
from array import array
from pathlib import Path
from typing import Any

from dlrig.errors import MissingExtraError
from dlrig.pack.format import SHARDS, read_index, shard_name
from dlrig.pack.plan import Plan

MARKER = b"__dlrig_shard__/"
_GROWTH = 2


def require() -> Any:
    try:
        import lmdb
    except ImportError:
        raise MissingExtraError("lmdb", "pack", "--format lmdb") from None
    return lmdb


def key(number: int) -> bytes:
    return b"%09d" % number


def open_env(dst: Path, readonly: bool, map_size: int = 1 << 30) -> Any:
    lmdb = require()
    if readonly:
        return lmdb.open(str(dst), readonly=True, lock=False, readahead=False, subdir=True)
    return lmdb.open(str(dst), map_size=map_size, subdir=True, metasync=True, sync=True)


def imported(dst: Path) -> dict[int, tuple[int, int]]:
    """Shards already in the database: number -> (samples, data bytes)."""
    if not (dst / "data.mdb").is_file():
        return {}
    env = open_env(dst, readonly=True)
    found: dict[int, tuple[int, int]] = {}
    try:
        with env.begin() as txn:
            cursor = txn.cursor()
            if cursor.set_range(MARKER):
                for raw_key, value in cursor:
                    if not raw_key.startswith(MARKER):
                        break
                    record = json.loads(value)
                    number = int(raw_key[len(MARKER) :].decode().split("-")[1])
                    found[number] = (int(record["samples"]), int(record["data_bytes"]))
    finally:
        env.close()
    return found


def reconcile(
    dst: Path, plan: Plan, staged: dict[int, tuple[int, int]]
) -> dict[int, tuple[int, int]]:
    """Done shards: in the database, or staged whole (index and data file) and not yet moved."""
    done = imported(dst)
    shards = dst / SHARDS
    for number, (samples, data_bytes) in staged.items():
        if number in done:
            continue
        data = shards / f"{shard_name(number)}.bin"
        with contextlib.suppress(OSError):
            if data.stat().st_size == data_bytes:
                done[number] = (samples, data_bytes)
    return done


def finish(dst: Path, plan: Plan, results: object) -> None:
    """Move every staged shard into the database, in shard order, then the totals."""
    shards = dst / SHARDS
    lmdb = require()
    already = imported(dst)
    staged = sum(
        (shards / f"{shard_name(n)}.bin").stat().st_size
        for n in range(plan.shard_count)
        if n not in already
    )
    existing = (dst / "data.mdb").stat().st_size if (dst / "data.mdb").exists() else 0
    env = open_env(
        dst, readonly=False, map_size=max(1 << 26, int((staged + existing) * 1.3) + (64 << 20))
    )
    labels = array("q")
    try:
        first = 0
        for number in range(plan.shard_count):
            name = shard_name(number)
            index = read_index(shards / f"{name}.idx", names=False)
            if number not in already:
                _move(env, lmdb, shards / f"{name}.bin", name, index, first)
            labels.extend(index.labels)
            first += index.count
        with env.begin(write=True) as txn:
            txn.put(b"__len__", str(first).encode())
            txn.put(b"__labels__", labels.tobytes())
        env.sync(True)
    finally:
        env.close()


def _move(env: Any, lmdb: Any, data_path: Path, name: str, index: Any, first: int) -> None:
    with open(data_path, "rb") as stream:
        size = index.data_bytes
        view = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        try:
            while True:
                try:
                    with env.begin(write=True) as txn:
                        offsets = index.offsets
                        for j in range(index.count):
                            txn.put(key(first + j), view[offsets[j] : offsets[j + 1]])
                        marker = {"samples": index.count, "data_bytes": size, "first": first}
                        txn.put(MARKER + name.encode(), json.dumps(marker).encode())
                    break
                except lmdb.MapFullError:
                    env.set_mapsize(env.info()["map_size"] * _GROWTH)
        finally:
            if isinstance(view, mmap.mmap):
                view.close()
    env.sync(True)
    data_path.unlink()

"""The destination folder: whether it may be written, who is writing it, what is already done.

dlrig only ever deletes what it wrote itself: `--overwrite` replaces a dlrig pack (finished or
not), and a folder holding anything else is refused whatever the options.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from dlrig.errors import InputError
from dlrig.pack.format import (
    DATA_SUFFIX,
    LOCK,
    MANIFEST,
    PLAN,
    SHARDS,
    BadIndex,
    read_index,
    read_json,
    shard_name,
)

LMDB_FILES = ("data.mdb", "lock.mdb")
_OURS = {MANIFEST, PLAN, LOCK, SHARDS, *LMDB_FILES}
_LOCK_WAIT_SECONDS = 3.0


def is_pack(dst: Path) -> bool:
    return (dst / MANIFEST).is_file() or (dst / PLAN).is_file()


def prepare(dst: Path, src: str, overwrite: bool) -> None:
    """Refuse a destination that must not be written; clear one `--overwrite` replaces."""
    if dst.exists() and not dst.is_dir():
        raise InputError(f"{dst}: exists and is not a folder", fix="give a folder for the pack")
    source = Path(src)
    if source.exists():
        here, there = os.path.realpath(dst), os.path.realpath(source)
        if here == there or here.startswith(there.rstrip("/") + "/"):
            raise InputError(
                f"{dst}: is inside the source {src}",
                fix="write the pack outside the folder being packed",
            )
    if not dst.exists():
        return
    if (dst / MANIFEST).is_file():
        if not overwrite:
            raise InputError(
                f"{dst}: already holds a packed dataset",
                fix="pass --overwrite to replace it, or give another destination",
            )
        clear(dst)
        return
    if (dst / PLAN).is_file():
        if overwrite:
            clear(dst)
        return  # an unfinished pack: resumed when its plan matches (checked by the caller)
    try:
        foreign = sorted(p.name for p in dst.iterdir() if p.name not in _OURS)
    except OSError as exc:
        raise InputError(
            f"{dst}: cannot list it ({exc.strerror})", fix="check permissions"
        ) from None
    if foreign:
        raise InputError(
            f"{dst}: is a folder that is not a dlrig pack (it holds {foreign[0]!r}"
            + (f" and {len(foreign) - 1} more" if len(foreign) > 1 else "")
            + ")",
            fix="give a new or empty folder; dlrig does not delete files it did not write",
        )


def clear(dst: Path) -> None:
    """Remove a dlrig pack's files (and only those)."""
    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(dst / SHARDS)
    for name in (MANIFEST, PLAN, *LMDB_FILES):
        with contextlib.suppress(FileNotFoundError):
            (dst / name).unlink()


@contextlib.contextmanager
def locked(dst: Path) -> Iterator[None]:
    """Hold an exclusive lock on the destination while packing (workers inherit it)."""
    fd = os.open(dst / LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        deadline = time.monotonic() + _LOCK_WAIT_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES) or time.monotonic() > deadline:
                    raise InputError(
                        f"{dst}: another dlrig pack is writing it",
                        fix="wait for it to finish, or stop it and rerun to resume",
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            (dst / LOCK).unlink()


def remove_temporaries(shards_dir: Path) -> None:
    """A killed or stopped writer's partial files: never part of a pack."""
    if not shards_dir.is_dir():
        return
    for path in shards_dir.iterdir():
        if path.name.endswith((".tmp", ".blob")):
            with contextlib.suppress(OSError):
                path.unlink()


def finished_shards(shards_dir: Path, fmt: str, count: int) -> dict[int, tuple[int, int]]:
    """Shards already complete: number -> (samples, data bytes). A shard is complete when its
    index decodes and its data file has the size the index says (for LMDB: see lmdb_target)."""
    done: dict[int, tuple[int, int]] = {}
    if not shards_dir.is_dir():
        return done
    suffix = DATA_SUFFIX[fmt]
    for number in range(count):
        name = shard_name(number)
        index_path = shards_dir / f"{name}.idx"
        if not index_path.is_file():
            continue
        try:
            index = read_index(index_path, names=False)
        except (OSError, BadIndex, ValueError):
            continue
        if suffix:
            data = shards_dir / f"{name}{suffix}"
            try:
                size = data.stat().st_size
            except OSError:
                continue
            if fmt == "dlrig" and size != index.data_bytes:
                continue
        done[number] = (index.count, index.data_bytes)
    return done


def read_manifest(dst: Path) -> dict[str, object]:
    path = dst / MANIFEST
    if not path.is_file():
        if (dst / PLAN).is_file():
            raise InputError(
                f"{dst}: the pack is not finished (it was interrupted)",
                fix="rerun the same `dlrig pack SRC DST` command to resume it",
            )
        raise InputError(
            f"{dst}: not a dlrig pack (no {MANIFEST})", fix="give a folder `dlrig pack` wrote"
        )
    try:
        return read_json(path)
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: cannot be read ({exc})", fix="repack the dataset") from None

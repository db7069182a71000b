"""Packing one shard: read its samples from the source, write the data file and the index.

Runs in a worker process (forked, so the source — a user's Dataset included — is inherited,
not pickled) or inline when packing with one job. Failures come back as a `ShardFailure`
value, not an exception: exceptions with extra fields do not survive pickling between
processes intact, and the parent needs the path, the errno and the fix.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrig.errors import DlrigError
from dlrig.outputs import current_umask
from dlrig.pack.format import ShardIndex, index_digest, shard_name
from dlrig.pack.plan import Plan
from dlrig.pack.sinks import extension_of, open_sink
from dlrig.pack.sources import SampleReadError, Source

_PROGRESS_EVERY = 32
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class ShardResult:
    shard: int
    samples: int
    data_bytes: int
    index_blake2b: str
    skipped: tuple[dict[str, str], ...] = ()


@dataclass(frozen=True)
class ShardFailure:
    shard: int
    kind: str  # sample | disk_full | write | input | bug
    message: str
    fix: str | None = None
    path: str | None = None


@dataclass
class WorkerState:
    source: Source
    plan: Plan
    shards_dir: Path
    counter: Any = None  # multiprocessing.Value("q"): samples done, for the progress bar
    parent_pid: int = field(default_factory=os.getpid)


_STATE: WorkerState | None = None


def init_worker(state: WorkerState) -> None:
    """In each worker: die with the parent, leave Ctrl-C to the parent."""
    global _STATE
    _STATE = state
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A SIGKILLed parent must not leave workers finishing shards behind it: a resumed pack
    # would race them for the same files. The kernel kills this process when its parent dies.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != state.parent_pid:
        os._exit(1)  # the parent died before prctl took effect


def _tick(counter: Any, count: int) -> None:
    if counter is not None:
        with counter.get_lock():
            counter.value += count


_DISK_FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


def pack_shard(shard: int) -> ShardResult | ShardFailure:
    """Pack shard `shard` of the plan (the worker's state says which source and where)."""
    assert _STATE is not None
    state = _STATE
    name = shard_name(shard)
    where = state.shards_dir / name
    try:
        sink = open_sink(state.plan.format, state.shards_dir, name)
    except OSError as exc:
        return _os_failure(shard, exc, where)
    index = ShardIndex()
    skipped: list[dict[str, str]] = []
    pending = 0
    first = shard * state.plan.samples_per_shard
    tar = state.plan.format == "webdataset"
    try:
        for local, position in enumerate(state.plan.members(shard)):
            try:
                data, label = state.source.get(position)
            except SampleReadError as exc:
                if not state.plan.skip_bad:
                    return ShardFailure(
                        shard,
                        "sample",
                        f"{exc.name}: {exc.reason}",
                        "fix or remove the file, or pass --skip-bad to pack without it",
                        exc.name,
                    )
                skipped.append({"name": exc.name, "error": exc.reason})
                continue
            sample_name = state.source.names[position]
            if tar:  # only WebDataset names members by key and extension
                sink.add(data, f"{first + local:09d}", extension_of(sample_name), label)
            else:
                sink.add(data, "", "", label)
            index.add(len(data), label, zlib.crc32(data), sample_name)
            pending += 1
            if pending == _PROGRESS_EVERY:
                _tick(state.counter, pending)
                pending = 0
        _tick(state.counter, pending)
        if skipped:
            index.extra["skipped"] = skipped
        sink.finish(index)
        raw = index.encode()
        # The index is written last and atomically: its presence marks the shard done.
        _write_durably(where.with_suffix(".idx"), raw)
        return ShardResult(shard, index.count, index.data_bytes, index_digest(raw), tuple(skipped))
    except OSError as exc:
        return _os_failure(shard, exc, where)
    except DlrigError as exc:
        return ShardFailure(shard, "input", exc.message, exc.fix)
    except Exception as exc:  # noqa: BLE001 - a bug: carried to the parent, which reports it
        return ShardFailure(shard, "bug", f"{type(exc).__name__}: {exc}")
    finally:
        sink.abort()  # after finish() this only closes what is left; a partial shard is removed


def _write_durably(path: Path, data: bytes) -> None:
    """Temporary file, fsync, rename, folder fsync; an OSError keeps its errno (disk full)."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        with open(temporary, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fchmod(stream.fileno(), 0o666 & ~current_umask())
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _os_failure(shard: int, exc: OSError, where: Path) -> ShardFailure:
    if exc.errno in _DISK_FULL:
        return ShardFailure(shard, "disk_full", exc.strerror or str(exc), path=str(where))
    return ShardFailure(shard, "write", f"{where}: {exc.strerror or exc}", path=str(where))

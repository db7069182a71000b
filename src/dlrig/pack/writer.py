"""`dlrig.pack.pack(SRC, DST)`: shards packed in parallel, resumable, with a manifest last.

Order of writes, so that an interrupt at any point (Ctrl-C, SIGKILL, a full disk, a power
cut) leaves nothing half-written that is taken for done:
1. the plan (`.dlrig-pack-plan.json`), atomically, before any shard;
2. per shard: data to `NAME.bin.tmp`, fsync, rename; then the index, atomically — the index's
   presence (and a data file of the size it states) marks the shard done;
3. the manifest, atomically, once every shard is done; then the plan is removed.
A rerun of the same command finds the plan, keeps the finished shards and redoes the rest.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dlrig.pack.worker as worker
from dlrig import __version__
from dlrig.errors import DlrigError, InputError
from dlrig.outputs import ensure_directory, write_text_atomic
from dlrig.pack import destination, lmdb_target
from dlrig.pack.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    FORMATS,
    MANIFEST,
    PLAN,
    SHARDS,
    ShardEntry,
    decode_index,
    index_digest,
    shard_name,
)
from dlrig.pack.plan import Plan, ShardSize, default_shard_size, make_plan, read_plan, write_plan
from dlrig.pack.sources import IMAGE_EXTENSIONS, Source, open_source
from dlrig.pack.worker import ShardFailure, ShardResult, WorkerState, init_worker, pack_shard
from dlrig.report import envelope

Progress = Callable[[int, int], None]  # (samples done, samples in total)
SCHEMA = "dlrig.pack"
SCHEMA_VERSION = 1


def _no_progress(done: int, total: int) -> None:
    return None


@dataclass(frozen=True)
class PackOptions:
    fmt: str = "dlrig"
    shard_bytes: int | None = None  # None: from the filesystem (knowledge/pack_shard_sizes)
    jobs: int | None = None  # None: the usable cores
    seed: int | None = 0  # packing order; None keeps the source's order
    skip_bad: bool = False
    overwrite: bool = False
    extensions: Sequence[str] | None = IMAGE_EXTENSIONS  # ImageFolder files; None: any


@dataclass
class PackReport:
    dst: str
    fmt: str
    source: dict[str, Any]
    samples: int
    data_bytes: int
    shards: int
    resumed_shards: int
    seconds: float
    jobs: int
    shard_bytes_target: int
    shard_size_reason: str
    fstype: str | None
    storage: str = "unknown"
    shard_bytes_default: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        rate = self.samples / self.seconds if self.seconds > 0 else None
        return envelope(
            SCHEMA,
            SCHEMA_VERSION,
            {
                "command": "pack",
                "dst": self.dst,
                "format": self.fmt,
                "source": self.source,
                "samples": self.samples,
                "data_bytes": self.data_bytes,
                "shards": self.shards,
                "resumed_shards": self.resumed_shards,
                "seconds": round(self.seconds, 3),
                "samples_per_second": None if rate is None else round(rate, 1),
                "jobs": self.jobs,
                "shard_bytes_target": self.shard_bytes_target,
                "shard_size_reason": self.shard_size_reason,
                "shard_bytes_default": self.shard_bytes_default,
                "fstype": self.fstype,
                "storage": self.storage,
                "skipped": self.skipped,
            },
        )


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def pack(
    src: str | Path,
    dst: str | Path,
    options: PackOptions | None = None,
    progress: Progress = _no_progress,
) -> PackReport:
    """Pack SRC (folder, .csv/.jsonl list, or module:factory) into DST; resumes a pack of
    the same source and options that was interrupted."""
    options = options or PackOptions()
    if options.fmt not in FORMATS:
        raise InputError(
            f"--format {options.fmt}: unknown", fix=f"pick one of {', '.join(FORMATS)}"
        )
    if options.fmt == "lmdb":
        lmdb_target.require()
    started = time.perf_counter()
    target = Path(dst)
    source = open_source(str(src), options.extensions)
    destination.prepare(target, str(src), options.overwrite)
    ensure_directory(target, "DST")
    jobs = max(1, options.jobs or usable_cores())
    size = default_shard_size(target)
    with destination.locked(target):
        plan, shard_target, mean = _plan(target, source, options, size, jobs)
        shards_dir = ensure_directory(target / SHARDS, "DST")
        destination.remove_temporaries(shards_dir)
        done = destination.finished_shards(shards_dir, plan.format, plan.shard_count)
        if plan.format == "lmdb":
            done = lmdb_target.reconcile(target, plan, done)
        resumed = len(done)
        _check_space(target, plan, done, mean)
        results = _run(source, plan, shards_dir, jobs, sorted(done), progress)
        if plan.format == "lmdb":
            lmdb_target.finish(target, plan, results)
        entries, skipped = _entries(shards_dir, plan)
        manifest = _manifest(source, plan, entries, skipped)
        write_text_atomic(target / MANIFEST, _json(manifest))
        with contextlib.suppress(FileNotFoundError):
            (target / PLAN).unlink()
    return PackReport(
        str(target),
        plan.format,
        source.describe(),
        manifest["samples"],
        manifest["data_bytes"],
        len(entries),
        resumed,
        time.perf_counter() - started,
        jobs,
        shard_target,
        size.reason if options.shard_bytes is None else "--shard-size",
        size.fstype,
        size.storage,
        size.bytes,
        skipped,
    )


def _json(document: dict[str, Any]) -> str:
    import json

    return json.dumps(document, indent=1) + "\n"


def _plan(
    target: Path, source: Source, options: PackOptions, size: ShardSize, jobs: int
) -> tuple[Plan, int, float]:
    plan, shard_target, mean = make_plan(
        source, options.fmt, options.shard_bytes, size, jobs, options.seed, options.skip_bad
    )
    previous = read_plan(target)
    if previous is not None:
        comparable = {k: v for k, v in plan.to_dict().items() if k != "samples_per_shard"}
        earlier = {k: v for k, v in previous.to_dict().items() if k != "samples_per_shard"}
        explicit_change = (
            options.shard_bytes is not None and previous.samples_per_shard != plan.samples_per_shard
        )
        if comparable != earlier or explicit_change:
            differs = sorted(k for k in comparable if comparable[k] != earlier.get(k))
            raise InputError(
                f"{target}: holds an unfinished pack made with other settings or from another "
                f"source ({', '.join(differs) or 'shard size'} differ)",
                fix="rerun it with the same options to resume it, or pass --overwrite to "
                "start over",
            )
        return previous, previous.samples_per_shard * int(mean), mean
    write_plan(target, plan)
    return plan, shard_target, mean


def _check_space(target: Path, plan: Plan, done: dict[int, tuple[int, int]], mean: float) -> None:
    left = plan.total - sum(samples for samples, _ in done.values())
    needed = int(left * mean * (1.1 if plan.format == "webdataset" else 1.0))
    free = shutil.disk_usage(target).free
    if needed > free:
        raise InputError(
            f"{target}: not enough free space: the pack needs about {needed / 1e9:.2f} GB more "
            f"and {free / 1e9:.2f} GB are free",
            fix="free some space or pick a destination on a larger disk",
        )


def _run(
    source: Source,
    plan: Plan,
    shards_dir: Path,
    jobs: int,
    done: list[int],
    progress: Progress,
) -> list[ShardResult]:
    todo = [n for n in range(plan.shard_count) if n not in set(done)]
    already = sum(len(plan.members(n)) for n in done)
    progress(already, plan.total)
    counter = multiprocessing.get_context("fork").Value("q", 0)
    state = WorkerState(source, plan, shards_dir, counter)
    # A file-size limit (`ulimit -f`) must fail a write with EFBIG, reported as a full disk,
    # not kill the process with SIGXFSZ.
    previous_xfsz = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        if jobs == 1 or len(todo) <= 1:
            return _run_inline(state, todo, already, progress)
        return _run_pool(state, todo, jobs, already, progress)
    finally:
        signal.signal(signal.SIGXFSZ, previous_xfsz)
        destination.remove_temporaries(shards_dir)


def _run_inline(
    state: WorkerState, todo: list[int], already: int, progress: Progress
) -> list[ShardResult]:
    worker._STATE = state
    results = []
    for shard in todo:
        outcome = pack_shard(shard)
        progress(already + state.counter.value, state.plan.total)
        results.append(_accept(outcome, state))
    return results


def _run_pool(
    state: WorkerState, todo: list[int], jobs: int, already: int, progress: Progress
) -> list[ShardResult]:
    context = multiprocessing.get_context("fork")
    executor = ProcessPoolExecutor(
        max_workers=min(jobs, len(todo)),
        mp_context=context,
        initializer=init_worker,
        initargs=(state,),
    )
    results: list[ShardResult] = []
    try:
        pending: set[Future[ShardResult | ShardFailure]] = {
            executor.submit(pack_shard, shard) for shard in todo
        }
        while pending:
            finished, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            progress(already + state.counter.value, state.plan.total)
            for future in finished:
                try:
                    outcome = future.result()
                except BrokenProcessPool:
                    raise DlrigError(
                        "a packing process died (killed from outside, e.g. by the kernel's "
                        "out-of-memory killer: see `dmesg`)",
                        fix="rerun the same command to resume (finished shards are kept); "
                        "with less memory, pass fewer --jobs",
                    ) from None
                results.append(_accept(outcome, state))
        return results
    finally:
        # On success the workers are idle; on a failure or a stop they are killed mid-shard
        # (their partial files are removed by the caller), never left running.
        processes = dict(getattr(executor, "_processes", None) or {})
        executor.shutdown(wait=False, cancel_futures=True)
        for process in processes.values():
            with contextlib.suppress(Exception):
                process.kill()
        for process in processes.values():
            with contextlib.suppress(Exception):
                process.join(timeout=5)


def _accept(outcome: ShardResult | ShardFailure, state: WorkerState) -> ShardResult:
    if isinstance(outcome, ShardResult):
        return outcome
    kept = "; the finished shards are kept: rerun the same command to resume"
    if outcome.kind == "disk_full":
        raise InputError(
            f"{state.shards_dir.parent}: the disk is full ({outcome.message} while writing "
            f"{shard_name(outcome.shard)}); that shard was not kept",
            fix="free some space (or raise the file-size limit, `ulimit -f`)" + kept,
        )
    if outcome.kind == "sample":
        raise InputError(outcome.message, fix=(outcome.fix or "") + kept)
    if outcome.kind == "bug":
        raise RuntimeError(f"packing {shard_name(outcome.shard)} failed: {outcome.message}")
    raise InputError(outcome.message, fix=(outcome.fix or "check the destination") + kept)


def _entries(shards_dir: Path, plan: Plan) -> tuple[list[ShardEntry], list[dict[str, str]]]:
    entries: list[ShardEntry] = []
    skipped: list[dict[str, str]] = []
    first = 0
    for number in range(plan.shard_count):
        name = shard_name(number)
        raw = (shards_dir / f"{name}.idx").read_bytes()
        index = decode_index(raw, name, names=False)
        entries.append(ShardEntry(name, index.count, index.data_bytes, index_digest(raw), first))
        skipped += index.extra.get("skipped", [])
        first += index.count
    return entries, skipped


def _manifest(
    source: Source, plan: Plan, entries: list[ShardEntry], skipped: list[dict[str, str]]
) -> dict[str, Any]:
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "data_format": plan.format,
        "created_by": f"dlrig {__version__}",
        "created_unix": int(time.time()),
        "source": source.describe(),
        "source_fingerprint": plan.fingerprint,
        "order": {"shuffled": plan.seed is not None, "seed": plan.seed},
        "samples": sum(e.samples for e in entries),
        "data_bytes": sum(e.data_bytes for e in entries),
        "labels": source.label_map,
        "checksums": {"sample": "crc32", "shard": "blake2b-128 of the shard index"},
        "shards": [e.to_dict() for e in entries],
        "skipped": skipped,
    }

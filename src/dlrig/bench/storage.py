"""Storage: sequential and random reads of a test file (or an existing file), MB/s and IOPS.

Reads bypass the page cache with O_DIRECT where the filesystem allows it; elsewhere the file's
cached pages are dropped first (posix_fadvise DONTNEED) and the report says so. One thread,
one request in flight (fio's psync engine at iodepth 1) — the same pattern `fio` is run with
beside it when it is installed, so the two figures are comparable.

A directory gets a test file written into it and removed afterwards, whatever happens; an
existing file is only read.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from dlrig.bench.reads import (
    MIN_TIMED_SECONDS,
    RANDOM_BLOCK,
    SEQ_BLOCK,
    SEQ_LIMIT_BYTES,
    ReadFigures,
    huge_pages_free,
    random_read,
    sequential_read,
)
from dlrig.bench.results import BenchResult, Progress, judged, no_progress
from dlrig.errors import InputError
from dlrig.machine.storage import filesystem_type

# An 8-GPU image-training job reading ~110 KB JPEGs at ~1,000 images/s per GPU needs
# ~0.9 GB/s; below 1 GB/s the disk, not the GPUs, sets the pace.
NEEDED_MB_S = 1000.0
_FIX = (
    "the dataset's storage reads below the ~1 GB/s an image-training pipeline needs: put the "
    "dataset on local NVMe (or cache it there), pack small files into large shards "
    "(WebDataset/TFRecord/`dlrig pack`) so reads are sequential, and read with several "
    "DataLoader workers"
)


def _parse_size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    cleaned = text.strip().lower().removesuffix("ib").removesuffix("b")
    try:
        if cleaned and cleaned[-1] in units:
            return int(float(cleaned[:-1]) * units[cleaned[-1]])
        return int(cleaned)
    except (ValueError, OverflowError):
        raise InputError(f"--size {text!r} is not a size", fix="e.g. 1G, 512M") from None


def size_text(size: int) -> str:
    """Bytes the way --size spells them: 64 MiB, 1 GiB, 1.5 GiB."""
    if size >= 1 << 30:
        return (
            f"{size / (1 << 30):g} GiB" if size % (1 << 27) == 0 else f"{size / (1 << 30):.2f} GiB"
        )
    return f"{size / (1 << 20):.0f} MiB"


def parse_size(text: str) -> int:
    size = _parse_size(text)
    if size < 16 * SEQ_BLOCK:
        raise InputError(f"--size {text} is too small", fix="give at least 16M (1G is better)")
    return size


@contextlib.contextmanager
def test_file(directory: Path, size: int, progress: Progress) -> Iterator[Path]:
    """A file of `size` incompressible bytes in `directory`, removed on the way out."""
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(
            f"{directory}: cannot write a test file here (permission denied)",
            fix="give a directory you can write to, or an existing file to read",
        )
    free = shutil.disk_usage(directory).free
    if free < size + (64 << 20):
        room = free - (64 << 20)
        # Suggest what fits (a power of two of MiB, at least the 16 MiB floor) or say none does.
        fits = 1 << max(24, (max(room, 1) >> 20).bit_length() - 1 + 20) if room >= 16 << 20 else 0
        raise InputError(
            f"{directory}: no room for the {size_text(size)} test file "
            f"({size_text(max(free, 0))} free)",
            fix=f"free some space or pass a smaller --size (e.g. --size {fits >> 20}M)"
            if fits
            else "free some space, or give a directory on a disk with room",
        )
    try:
        handle, name = tempfile.mkstemp(prefix=".dlrig-bench-", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise InputError(
            f"{directory}: cannot create a test file ({exc.strerror})",
            fix="give a directory you can write to, or an existing file to read",
        ) from None
    path = Path(name)
    try:
        _fill(handle, size, progress, directory)
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()


def _fill(handle: int, size: int, progress: Progress, directory: Path) -> None:
    """Write `size` incompressible bytes to the open file and make them durable."""
    try:
        chunk = bytearray(os.urandom(8 << 20))
        written = 0
        with os.fdopen(handle, "wb", buffering=0) as stream:
            while written < size:
                chunk[:8] = written.to_bytes(8, "little")  # no two chunks alike
                piece = memoryview(chunk)[: min(len(chunk), size - written)]
                stream.write(piece)
                written += len(piece)
                progress("storage: writing the test file", 0.3 * written / size)
            os.fsync(stream.fileno())
    except OSError as exc:
        if exc.errno == 28:  # ENOSPC: the free-space check raced with another writer
            raise InputError(
                f"{directory}: ran out of space writing the test file",
                fix="free some space or pass a smaller --size",
            ) from None
        raise InputError(
            f"{directory}: cannot write the test file ({exc.strerror})",
            fix="check the directory and the disk (`dmesg` for I/O errors)",
        ) from None


def fio(
    path: Path, pattern: str, block: int, direct: bool, seconds: float | None
) -> ReadFigures | None:
    """fio's figure for the same file and pattern (psync, iodepth 1, one job); None without fio
    or when it fails.

    fio gets huge-page buffers (--mem=shmhuge) when the system has free huge pages, like
    dlrig's reader; otherwise (or if that is refused) ordinary memory, and its figure may
    then read low on VMs."""
    binary = shutil.which("fio")
    if binary is None:
        return None
    size = min(path.stat().st_size, SEQ_LIMIT_BYTES)
    argv = [
        binary,
        "--name=dlrig",
        "--filename=" + str(path).replace(":", "\\:"),  # fio splits file names at ':'
        f"--rw={'read' if pattern == 'seq' else 'randread'}",
        f"--bs={block}",
        f"--size={size - size % block}",
        f"--direct={1 if direct else 0}",
        "--invalidate=1",
        "--ioengine=psync",
        "--iodepth=1",
        "--numjobs=1",
        "--readonly",
        "--output-format=json",
    ]
    if seconds is not None:
        argv += [f"--runtime={seconds:g}", "--time_based"]
    attempts = [[*argv, "--mem=shmhuge"], argv] if direct and huge_pages_free() >= 2 else [argv]
    for attempt in attempts:
        try:
            completed = subprocess.run(
                attempt, capture_output=True, text=True, timeout=600, check=False
            )
            report = json.loads(completed.stdout[completed.stdout.find("{") :])
            read = report["jobs"][0]["read"]
        except (subprocess.TimeoutExpired, ValueError, KeyError, IndexError):
            continue  # e.g. shmhuge refused without CAP_IPC_LOCK: try ordinary memory
        runtime = float(read.get("runtime", 0)) / 1000
        return ReadFigures(
            float(read["bw_bytes"]) / 1e6,
            float(read["iops"]),
            runtime,
            int(read["io_bytes"]),
            "huge pages" if "--mem=shmhuge" in attempt else "ordinary pages",
        )
    return None


def run(
    path: str | Path,
    size: int = 1 << 30,
    random_seconds: float = 5.0,
    random_block: int = RANDOM_BLOCK,
    with_fio: bool = True,
    progress: Progress = no_progress,
) -> list[BenchResult]:
    target = Path(path)
    random_seconds = max(random_seconds, MIN_TIMED_SECONDS)  # no figure from a shorter read
    if not target.exists():
        raise InputError(f"{target}: no such file or directory", fix="give the dataset's directory")
    if target.is_dir():
        with test_file(target, size, progress) as file:
            return _measure(
                file,
                f"a {size_text(size)} test file in {target}",
                random_seconds,
                random_block,
                with_fio,
                progress,
            )
    if not os.access(target, os.R_OK):
        raise InputError(f"{target}: permission denied", fix="give a file you can read")
    if target.stat().st_size < 16 * SEQ_BLOCK:
        raise InputError(
            f"{target}: too small to measure ({target.stat().st_size} bytes)",
            fix="give a file of at least 16 MB, or a directory for a test file",
        )
    return _measure(target, f"{target}", random_seconds, random_block, with_fio, progress)


_RAM_FILESYSTEMS = {"tmpfs", "ramfs"}
AGREE = 0.2  # dlrig and fio within 20% of each other: one figure


def agreement(dlrig: ReadFigures, fio_figures: ReadFigures) -> tuple[str, str]:
    """Which figure the verdict uses ("dlrig" or "fio") and why, in words for the note.

    Within 20% they agree and dlrig's stands. Beyond it, dlrig's figure is kept only when the
    difference has a known cause (fio read into scattered 4 KiB pages where dlrig had a huge
    page: on VMs that splits each request); otherwise the lower figure is the one claimed, since
    the disk has shown it can do at least that and no more was proven."""
    if fio_figures.mb_per_s <= 0:
        return "dlrig", "fio measured nothing"
    ratio = dlrig.mb_per_s / fio_figures.mb_per_s
    if 1 - AGREE <= ratio <= 1 + AGREE:
        return "dlrig", f"fio agrees within 20% ({ratio:.2f}x)"
    if ratio > 1 and fio_figures.buffer != "huge pages" and dlrig.buffer != "ordinary pages":
        return "dlrig", (
            f"dlrig reads {ratio:.1f}x fio's figure; trusted because fio read into ordinary "
            "4 KiB pages (no huge pages were free for it), which on VMs splits every request"
        )
    if ratio > 1:
        return "fio", (
            f"dlrig read {ratio:.1f}x fio's figure with no known reason: the lower, fio's, is "
            "the one claimed"
        )
    return "dlrig", f"fio read {1 / ratio:.1f}x dlrig's figure: the lower, dlrig's, is claimed"


def _measure(
    file: Path,
    what: str,
    random_seconds: float,
    random_block: int,
    with_fio: bool,
    progress: Progress,
) -> list[BenchResult]:
    progress("storage: sequential read", 0.35)
    seq, mode = sequential_read(file)
    progress("storage: random read", 0.5)
    rnd, _ = random_read(file, random_block, random_seconds)
    cache = (
        "page cache bypassed (O_DIRECT)"
        if mode == "O_DIRECT"
        else "O_DIRECT refused here: cached pages dropped first (posix_fadvise DONTNEED); "
        "on tmpfs or with a busy cache, reads may come from RAM"
    )
    fio_seq = fio_rnd = None
    if with_fio:
        progress("storage: fio sequential", 0.65)
        fio_seq = fio(file, "seq", SEQ_BLOCK, mode == "O_DIRECT", MIN_TIMED_SECONDS)
        progress("storage: fio random", 0.8)
        fio_rnd = fio(file, "random", random_block, mode == "O_DIRECT", random_seconds)
    fstype = filesystem_type(str(file))
    in_ram = fstype in _RAM_FILESYSTEMS
    results = []
    for test, figures, fio_figures, block in (
        ("seq_read", seq, fio_seq, SEQ_BLOCK),
        ("random_read", rnd, fio_rnd, random_block),
    ):
        detail: dict[str, object] = {
            "iops": round(figures.iops, 1),
            "block_bytes": block,
            "bytes_read": figures.bytes_read,
            "seconds": round(figures.seconds, 3),
            "cache": mode,
            "filesystem": fstype,
        }
        note = f"{what} ({fstype or 'unknown filesystem'}); {block >> 10} KiB reads, one at a time; {cache}"
        if with_fio and fio_figures is None and shutil.which("fio"):
            note += "; fio failed on this file (run it by hand to see why)"
        value = round(figures.mb_per_s, 1)
        if fio_figures is not None:
            detail["fio_mb_s"] = round(fio_figures.mb_per_s, 1)
            detail["fio_iops"] = round(fio_figures.iops, 1)
            trusted, why = agreement(figures, fio_figures)
            detail["trusted"] = trusted
            note += f"; fio on the same file and pattern: {fio_figures.mb_per_s:.0f} MB/s; {why}"
            if trusted == "fio":
                value = round(fio_figures.mb_per_s, 1)
        unjudged = None
        if in_ram:
            # tmpfs accepts O_DIRECT as a no-op: the figure is memory speed, not a disk's.
            unjudged = f"; {fstype} keeps files in RAM: this is memory speed, not a disk"
        elif test == "random_read":
            # One request at a time is latency-bound; DataLoader workers read in parallel, so
            # this informs (disk latency) rather than judges the pipeline.
            unjudged = "; DataLoader workers issue reads in parallel and get more"
        if unjudged is not None:
            results.append(
                BenchResult.of(
                    "storage",
                    test,
                    value,
                    "MB/s",
                    None,
                    "info",
                    None,
                    note + unjudged,
                    None,
                    detail,
                )
            )
        else:
            results.append(
                judged(
                    "storage",
                    test,
                    value,
                    "MB/s",
                    NEEDED_MB_S,
                    100.0,
                    _FIX,
                    note,
                    cause="input_pipeline_bound",
                    detail=detail,
                )
            )
    progress("storage", 1.0)
    return results

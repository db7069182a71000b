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
import ctypes
import json
import mmap
import os
import random
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from dlrig.bench.results import BenchResult, Progress, judged, no_progress
from dlrig.errors import InputError
from dlrig.machine.storage import filesystem_type

# An 8-GPU image-training job reading ~110 KB JPEGs at ~1,000 images/s per GPU needs
# ~0.9 GB/s; below 1 GB/s the disk, not the GPUs, sets the pace.
NEEDED_MB_S = 1000.0
SEQ_BLOCK = 1 << 20
RANDOM_BLOCK = 128 << 10  # a typical training image file
_ALIGN = 4096
_FIX = (
    "the dataset's storage reads below the ~1 GB/s an image-training pipeline needs: put the "
    "dataset on local NVMe (or cache it there), pack small files into large shards "
    "(WebDataset/TFRecord/`dlrig pack`) so reads are sequential, and read with several "
    "DataLoader workers"
)


@dataclass(frozen=True)
class ReadFigures:
    mb_per_s: float
    iops: float
    seconds: float
    bytes_read: int
    buffer: str = "a transparent huge page"  # what the reads landed in (see read_buffer)


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


def _open_uncached(path: Path) -> tuple[int, str]:
    """A read-only fd that bypasses the page cache, and how."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECT", 0)
    try:
        fd = os.open(path, flags)
        # Some filesystems accept the flag and fail the first read (EINVAL): try one.
        buffer = mmap.mmap(-1, _ALIGN)
        os.preadv(fd, [buffer], 0)
        buffer.close()
        return fd, "O_DIRECT"
    except OSError:
        with contextlib.suppress(NameError, OSError):
            os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    return fd, "buffered"


_HUGE = 2 << 20


def read_buffer(size: int) -> memoryview:
    """A page-aligned buffer of `size` bytes, on a transparent huge page where the kernel
    allows it.

    Direct I/O hands the device one segment per physically contiguous run of the buffer. With
    4 KiB pages scattered in RAM a 1 MiB read is 256 segments: virtio disks (254 segments per
    request) split it in two, and every device pays per segment. Measured on a cloud VM: the
    same 1 MiB O_DIRECT reads ran at 1.2 GB/s into ordinary pages and 3.3 GB/s into a huge
    page, and fio matched the latter only with --mem=shmhuge. A huge page measures the disk,
    not the allocator's luck.
    """
    # The whole aligned 2 MiB range must lie inside the mapping for the kernel to use a huge page.
    span = -(-size // _HUGE) * _HUGE + _HUGE
    region = mmap.mmap(-1, span, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    with contextlib.suppress(AttributeError, OSError):
        region.madvise(mmap.MADV_HUGEPAGE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(region))
    start = (-address) % _HUGE
    view = memoryview(region)[start : start + size]
    view[:] = bytes(size)  # fault the pages in now (as a huge page where possible)
    return view


def cache_mode(path: Path) -> str:
    """ "O_DIRECT" when reads of `path` can bypass the page cache, else "buffered"."""
    fd, mode = _open_uncached(path)
    os.close(fd)
    return mode


def _drop_cache(fd: int) -> None:
    with contextlib.suppress(OSError, AttributeError):
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


SEQ_LIMIT_BYTES = 4 << 30  # a multi-TB shard is sampled, not read to the end


def sequential_read(
    path: Path, block: int = SEQ_BLOCK, limit: int = SEQ_LIMIT_BYTES
) -> tuple[ReadFigures, str]:
    fd, mode = _open_uncached(path)
    try:
        if mode != "O_DIRECT":
            _drop_cache(fd)
        size = min(os.fstat(fd).st_size, limit)
        size -= size % block
        buffer = read_buffer(block)
        started = time.perf_counter()
        done = 0
        ops = 0
        while done < size:
            got = os.preadv(fd, [buffer], done)
            if got <= 0:
                break
            done += got
            ops += 1
        seconds = time.perf_counter() - started
    finally:
        os.close(fd)
    return ReadFigures(done / seconds / 1e6, ops / seconds, seconds, done), mode


def random_read(
    path: Path, block: int = RANDOM_BLOCK, seconds: float = 5.0, seed: int = 0
) -> tuple[ReadFigures, str]:
    fd, mode = _open_uncached(path)
    try:
        if mode != "O_DIRECT":
            _drop_cache(fd)
        blocks = os.fstat(fd).st_size // block
        if blocks < 1:
            raise InputError(
                f"{path}: smaller than one {block >> 10} KiB block", fix="give a larger file"
            )
        rng = random.Random(seed)
        buffer = read_buffer(block)
        started = time.perf_counter()
        done = 0
        ops = 0
        while True:
            done += os.preadv(fd, [buffer], rng.randrange(blocks) * block)
            ops += 1
            if ops % 16 == 0 and time.perf_counter() - started >= seconds:
                break
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
    return ReadFigures(done / elapsed / 1e6, ops / elapsed, elapsed, done), mode


def huge_pages_free() -> int:
    """Free pre-allocated (hugetlbfs) huge pages, which fio's --mem=shmhuge needs."""
    try:
        with open("/proc/meminfo", encoding="ascii") as stream:
            for line in stream:
                if line.startswith("HugePages_Free:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


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
        fio_seq = fio(file, "seq", SEQ_BLOCK, mode == "O_DIRECT", None)
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
        if fio_figures is not None:
            detail["fio_mb_s"] = round(fio_figures.mb_per_s, 1)
            detail["fio_iops"] = round(fio_figures.iops, 1)
            note += f"; fio on the same file and pattern: {fio_figures.mb_per_s:.0f} MB/s"
            if fio_figures.buffer != "huge pages":
                # Without hugetlbfs pages fio's buffer is scattered 4 KiB pages; see read_buffer.
                note += " (fio without huge pages: on VMs its figure can read low)"
        value = round(figures.mb_per_s, 1)
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
                BenchResult(
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

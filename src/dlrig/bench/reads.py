"""The reads a storage bench times: one thread, one request in flight, O_DIRECT where the
filesystem allows it (else the file's cached pages dropped first), into a buffer on a huge
page. `dlrig.bench.storage` runs them on a test file and judges the figures."""

from __future__ import annotations

import contextlib
import ctypes
import mmap
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

from dlrig.errors import InputError

SEQ_BLOCK = 1 << 20
RANDOM_BLOCK = 128 << 10  # a typical training image file
_ALIGN = 4096


@dataclass(frozen=True)
class ReadFigures:
    mb_per_s: float
    iops: float
    seconds: float
    bytes_read: int
    buffer: str = "a transparent huge page"  # what the reads landed in (see read_buffer)


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
# No figure rests on less: a 256 MiB file read in 0.07 s measures the timer and a cache, not
# the disk. A small file is read again, from its start, until this much time has passed.
MIN_TIMED_SECONDS = 1.0


def sequential_read(
    path: Path,
    block: int = SEQ_BLOCK,
    limit: int = SEQ_LIMIT_BYTES,
    min_seconds: float = MIN_TIMED_SECONDS,
) -> tuple[ReadFigures, str]:
    fd, mode = _open_uncached(path)
    try:
        size = min(os.fstat(fd).st_size, limit)
        size -= size % block
        buffer = read_buffer(block)
        done = 0
        ops = 0
        seconds = 0.0
        while True:
            if mode != "O_DIRECT":
                _drop_cache(fd)  # every pass from the disk, not from the pass before
            started = time.perf_counter()
            offset = 0
            while offset < size:
                got = os.preadv(fd, [buffer], offset)
                if got <= 0:
                    break
                offset += got
                ops += 1
            seconds += time.perf_counter() - started
            done += offset
            if offset == 0 or seconds >= min_seconds:
                break
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

"""Setting and checking the cache state a read benchmark starts from: cold, fully cold, warm.

- `cold` (page-level): dirty pages written back (`sync`), each file's cached pages dropped
  with `posix_fadvise(POSIX_FADV_DONTNEED)`, then residency measured with `mincore(2)`. The
  kernel's dentry and inode caches are left as they are: a loose file's `open`/`stat` is then
  a cache hit, which flatters many small files.
- `cold-full`: `sync; echo 3 > /proc/sys/vm/drop_caches` (root only), which empties the whole
  machine's page cache and its dentry and inode caches; then residency checked with
  mincore; then `echo 2` once more, because that check opened every file and so put their
  dentries and inodes back. Every `open` of a loose file then reads its directory and inode
  from the disk, as on a dataset no one has touched since the last reboot, or on NFS after the
  attribute cache expired. It slows every other program on the machine for a while.
- `warm`: each file's pages dropped, then every file read once in order, residency checked
  (how pages came into the cache matters to a memory map: pages from a sequential read come
  in large folios, one page fault a few hundred KiB; pages from `WILLNEED` or random reads
  in 4 KiB ones, one fault every 64 KiB).

On a VM "cold" is guest-cold: the hypervisor may still cache the disk.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

CACHES = ("cold", "cold-full", "warm")
DROP_CACHES = Path("/proc/sys/vm/drop_caches")
_PAGE = mmap.PAGESIZE
_LOW_BIT = bytes(i & 1 for i in range(256))  # mincore: bit 0 of each byte = resident
_libc: Any = None


def _c() -> Any:
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
        libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
        _libc = libc
    return _libc


def resident_pages(path: str | Path) -> tuple[int, int]:
    """(pages in the page cache, pages) of a file, by mincore(2) on a shared mapping."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0, 0
        libc = _c()
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            pages = -(-size // _PAGE)
            vector = ctypes.create_string_buffer(pages)
            if libc.mincore(ctypes.c_void_p(address), size, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return vector.raw[:pages].translate(_LOW_BIT).count(1), pages
        finally:
            libc.munmap(ctypes.c_void_p(address), size)
    finally:
        os.close(fd)


def resident_fraction(paths: Iterable[str | Path]) -> float:
    resident = total = 0
    for path in paths:
        r, t = resident_pages(path)
        resident, total = resident + r, total + t
    return resident / total if total else 0.0


def drop_cache(paths: Iterable[str | Path]) -> None:
    os.sync()  # dirty pages cannot be dropped
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm_cache(paths: Iterable[str | Path]) -> None:
    for path in paths:
        with open(path, "rb", buffering=0) as stream:
            while stream.read(8 << 20):
                pass


def drop_all_caches(what: int = 3) -> str | None:
    """`sync; echo WHAT > /proc/sys/vm/drop_caches` (1 pages, 2 dentries and inodes, 3 both).
    None when done, else one line saying why it could not be."""
    os.sync()
    try:
        with open(DROP_CACHES, "w", encoding="ascii") as control:
            control.write(f"{what}\n")
    except OSError as exc:
        return f"cannot write {DROP_CACHES} ({exc.strerror or exc}): needs root outside a container"
    return None


def cached_dentries() -> int | None:
    """Dentries in the kernel's cache now (/proc/sys/fs/dentry-state's first field)."""
    try:
        return int(Path("/proc/sys/fs/dentry-state").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def set_cache(paths: Sequence[str | Path], cache: str) -> float:
    """Make the files cold, fully cold or warm; returns the fraction resident afterwards.
    Raises PermissionError with the reason when `cold-full` cannot drop the caches."""
    if cache == "cold":
        drop_cache(paths)
        return resident_fraction(paths)
    if cache == "cold-full":
        why = drop_all_caches(3)
        if why is not None:
            raise PermissionError(why)
        resident = resident_fraction(paths)
        drop_all_caches(2)  # the check above opened every file: their dentries/inodes go again
        return resident
    # Dropped first, then read in order: every format then starts from the page cache a
    # sequential read leaves (large folios), not from whatever its last reader left there.
    drop_cache(paths)
    warm_cache(paths)
    return resident_fraction(paths)

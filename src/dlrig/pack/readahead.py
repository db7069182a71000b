"""Reading ahead of a consumer: a thread reads the byte ranges that come next into the page
cache while the consumer slices samples out of what is already there.

How, and why this way (each point measured here: ext4 on a virtio disk, Linux 6.18,
read_ahead_kb 8192):

- The thread reads in storage order with `sendfile` to /dev/null (`fill`): the page
  cache's read path without the copy out (/dev/null discards the pages it is handed), so
  ~0 CPU where reading into a scratch buffer costs ~0.05 s a GB, and 1.8-1.9 GB/s cold
  against 1.2-1.6 for 4 MiB `preadv`s of the same shard here. Where sendfile is refused
  it falls back to `preadv` into a scratch buffer. Either goes through the kernel's
  on-demand readahead, which keeps a few MiB in flight and fills the page cache with large
  folios. `posix_fadvise(WILLNEED)` looks like the natural call but is worse on both counts:
  one call reads at most max(read_ahead_kb, max_sectors_kb) of its range (Linux's
  `force_page_cache_ra` clips it: WILLNEED over a 219 MB shard left 8.5 MB of it cached),
  and it fills the cache with 4 KiB pages: a memory map over them then takes a page fault
  every 64 KiB (16 a MiB, against 2.5 after a read), which made warm reads through a map
  ~4x slower (84k against 310k samples/s of 44 kB, one process).
- `os.sendfile` and `os.preadv` release the GIL: the disk is busy while the consumer works.
- Before reading a range the thread probes a few of its pages with `preadv(RWF_NOWAIT)`,
  which fails with EAGAIN instead of waiting when a page is not cached, and skips ranges
  that are already resident: a warm epoch costs a few probes, not a second copy.
- The consumer enters a unit once the thread has read it (`enter`): inside a shuffled window
  the consumer's reads are random, and a page it faulted in itself would come from a small
  synchronous read-around instead of the stream.

Reading ahead is an optimisation only: any failure (a file gone, a filesystem without
RWF_NOWAIT) leaves the consumer to fault its pages in itself, never a wrong byte.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

# The kernel's default readahead size: a WILLNEED this long is read whole whatever the
# device's settings (the reader's batch advice goes in pieces of it).
CHUNK_BYTES = 128 << 10
# One sendfile of `fill`. Large, because the reading thread needs the GIL back after each
# call: while the consumer thread is busy in Python, that waits up to the interpreter's switch
# interval (5 ms), and with 4 MiB pieces (~2 ms of disk each) the disk sat idle most of the
# time (a cold shard read at 0.72 GB/s beside a busy thread against 1.3-1.5 GB/s with 64 MiB).
_SEND_BYTES = 64 << 20
_SCRATCH_BYTES = 4 << 20  # one preadv of the fallback, into a scratch buffer this long
_PAGE = os.sysconf("SC_PAGE_SIZE")
_PROBES = 16  # pages probed per range before reading it
_OPEN_FILES = 8  # the thread's own descriptors, most recently used kept
_WAIT_SECONDS = 10.0
_PROBE = bytearray(1)  # scratch byte for the probes: its content is never used

Range = tuple[int, int, int]  # (shard number, first byte, end byte)


class _Sink:
    """Where `fill` sends what it reads: /dev/null, opened once per process (a descriptor
    inherited over fork works as well), or None once sendfile has been refused."""

    fd: int | None = -1
    scratch: memoryview | None = None


def fill(fd: int, start: int, stop: int, stopped: Callable[[], bool] = lambda: False) -> bool:
    """Read bytes [start, stop) of `fd` into the page cache without keeping them; False when
    `stopped()` said to stop first. Read errors propagate (OSError): callers treat filling
    as an optimisation only."""
    offset = start - start % _PAGE
    while offset < stop:
        if stopped():
            return False
        got = _sendfile(fd, offset, min(_SEND_BYTES, stop - offset))
        if got is None:
            if _Sink.scratch is None:
                _Sink.scratch = memoryview(bytearray(_SCRATCH_BYTES))
            want = min(_SCRATCH_BYTES, stop - offset)
            got = os.preadv(fd, [_Sink.scratch[:want]], offset)
        if got <= 0:
            break
        offset += got
    return True


def _sendfile(fd: int, offset: int, count: int) -> int | None:
    """sendfile to /dev/null: bytes read, or None where it is not supported here."""
    if _Sink.fd == -1:
        try:
            _Sink.fd = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            _Sink.fd = None
    if _Sink.fd is None:
        return None
    try:
        return os.sendfile(_Sink.fd, fd, offset, count)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EBADF):
            _Sink.fd = None  # this kernel or filesystem does not splice: read instead
            return None
        raise


def cached(fd: int, offset: int) -> bool | None:
    """Whether the page holding byte `offset` is in the page cache, without waiting for it;
    None where the kernel or the filesystem cannot say without reading."""
    flag = getattr(os, "RWF_NOWAIT", None)
    if flag is None:
        return None
    try:
        os.preadv(fd, [_PROBE], offset, flag)
    except BlockingIOError:
        return False
    except OSError:
        return None
    return True


def looks_cached(fd: int, start: int, stop: int) -> bool:
    """True when every probed page of [start, stop) is cached (then advising it is waste)."""
    if stop <= start:
        return True
    step = max(1, (stop - start) // _PROBES)
    return all(cached(fd, offset) for offset in range(start, stop, step))


class Readahead:
    """A daemon thread that reads units `first, first + 1, …` of a reading plan into the page
    cache, staying at most `ahead` units in front of the unit the consumer is in.

    `ranges(unit)` gives the byte ranges a unit reads; `paths(shard)` the file of a shard.
    The consumer calls `enter(unit)` as it moves (cheap when the unit has not changed) and
    `stop()` when it is done (from a `finally`: the thread never outlives its reader).
    """

    def __init__(
        self,
        paths: Callable[[int], Path],
        ranges: Callable[[int], Sequence[Range]],
        units: int,
        first: int = 0,
        ahead: int = 1,
    ) -> None:
        self._paths = paths
        self._ranges = ranges
        self._units = units
        self._ahead = max(0, ahead)
        self._first = first
        self._allowed = first + self._ahead
        self._done = first - 1  # the last unit read
        self._current = first - 1
        self._stopped = False
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="dlrig-pack-readahead", daemon=True)
        self._thread.start()

    def enter(self, unit: int) -> None:
        """The consumer is about to read `unit`: let the thread go up to `unit + ahead`, and
        wait until `unit` itself is read (or the thread has given up)."""
        if unit == self._current:
            return
        self._current = unit
        with self._wake:
            self._allowed = max(self._allowed, unit + self._ahead)
            self._wake.notify_all()
            # Bounded: a thread held up for that long is not worth waiting for.
            self._wake.wait_for(lambda: self._done >= unit or self._stopped, timeout=_WAIT_SECONDS)

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify_all()
        # A read in flight returns within one piece's I/O: well under a second.
        self._thread.join(timeout=5.0)

    def _run(self) -> None:
        files: OrderedDict[int, int] = OrderedDict()
        try:
            for unit in range(self._first, self._units):
                with self._wake:
                    while unit > self._allowed and not self._stopped:
                        self._wake.wait()
                    if self._stopped:
                        return
                for shard, start, stop in self._ranges(unit):
                    fd = self._file(files, shard)
                    if not looks_cached(fd, start, stop) and not fill(
                        fd, start, stop, lambda: self._stopped
                    ):
                        return
                with self._wake:
                    self._done = unit
                    self._wake.notify_all()
        except OSError:
            return  # an optimisation only: the consumer faults its pages in itself
        finally:
            with self._wake:
                self._stopped = True  # nothing more will be read: no one waits for it
                self._wake.notify_all()
            for fd in files.values():
                with contextlib.suppress(OSError):
                    os.close(fd)

    def _file(self, files: OrderedDict[int, int], shard: int) -> int:
        fd = files.get(shard)
        if fd is not None:
            files.move_to_end(shard)
            return fd
        if len(files) >= _OPEN_FILES:
            _, oldest = files.popitem(last=False)
            os.close(oldest)
        fd = os.open(self._paths(shard), os.O_RDONLY | os.O_CLOEXEC)
        files[shard] = fd
        return fd

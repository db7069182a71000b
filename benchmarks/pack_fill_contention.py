"""How fast `dlrig.pack.readahead.fill` reads a page-cold file into the page cache while
another thread of the same process is busy in Python (what a DataLoader's consumer is), for
the piece size dlrig uses per `sendfile` call and for smaller ones.

    .venv/bin/python benchmarks/pack_fill_contention.py [--file-mb 512] [--trials 3]

Why it matters: the reading thread needs the GIL back after each call, and a thread that is
busy in Python hands it over only every switch interval (5 ms): with small pieces the disk
idles between them. Each case drops the file's pages (posix_fadvise DONTNEED, checked with
mincore) and reads it whole, idle and beside a spinning thread. The last line compares dlrig's
piece size with 4 MiB, both beside the busy thread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

from dlrig.bench.pack_cache import set_cache
from dlrig.pack import readahead


def read_cold(path: str, piece_bytes: int, busy: bool) -> float:
    """GB/s of one `fill` of the whole page-cold file."""
    resident = set_cache([path], "cold")
    if resident > 0.01:
        raise SystemExit(f"{path}: {resident:.0%} still cached after DONTNEED (tmpfs?)")
    stop = threading.Event()

    def spin() -> None:
        count = 0
        while not stop.is_set():
            count += 1

    spinner = threading.Thread(target=spin, daemon=True)
    if busy:
        spinner.start()
    saved = readahead._SEND_BYTES
    readahead._SEND_BYTES = piece_bytes
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        started = time.perf_counter()
        readahead.fill(fd, 0, size)
        seconds = time.perf_counter() - started
    finally:
        os.close(fd)
        readahead._SEND_BYTES = saved
        stop.set()
        if busy:
            spinner.join()
    return size / seconds / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--file-mb", type=int, default=512)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where the test file goes")
    args = parser.parse_args()
    dlrig_piece = readahead._SEND_BYTES
    pieces = sorted({4 << 20, 16 << 20, dlrig_piece})
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        path = os.path.join(folder, "data.bin")
        block = os.urandom(1 << 20)
        with open(path, "wb") as out:
            for _ in range(args.file_mb):
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        results: dict[tuple[int, bool], list[float]] = {}
        for _ in range(args.trials):  # interleaved, so drift in the disk hits every case
            for piece in pieces:
                for busy in (False, True):
                    results.setdefault((piece, busy), []).append(read_cold(path, piece, busy))
    print(f"{args.file_mb} MiB page-cold file, median of {args.trials} trials, GB/s:")
    for (piece, busy), values in sorted(results.items()):
        label = "beside a busy thread" if busy else "idle"
        print(f"  {piece >> 20:3d} MiB a call, {label:20s} {statistics.median(values):.2f}")
    small = statistics.median(results[(4 << 20, True)])
    ours = statistics.median(results[(dlrig_piece, True)])
    print(
        f"file_mb={args.file_mb} trials={args.trials} dlrig_piece_mib={dlrig_piece >> 20} "
        f"busy_4mib_gb_s={small:.2f} busy_dlrig_gb_s={ours:.2f} ratio={ours / small:.2f}"
    )


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()

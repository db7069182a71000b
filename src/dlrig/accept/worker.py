"""One burn-in load worker: `python -m dlrig.accept.worker KIND ...`, one process each.

Kinds: `cpu` (SHA-256 over a buffer in cache, one core), `memory` (copies between two buffers
larger than any cache: DRAM traffic), `disk` (writes a file with fsync, drops it from the page
cache, reads it back and checks every byte), `gpu` (matmuls at the GPU's peak dtype plus
device-memory copies; see `worker_gpu`).

The worker prints one JSON line when it is ready (`{"ready": ..., "detail": {...}}`) or cannot
run (`{"error": "..."}`, then a non-zero exit), then one line per interval:
`{"t": UNIX_TIME, "metrics": {...}}`. It stops by itself after `--seconds`, when its parent
goes away (a dlrig killed with SIGKILL leaves no load running behind it), or on SIGTERM from
the parent, which is how `dlrig accept` stops it early. Load generation touches hardware by
design, as `bench` does.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import hashlib
import os
import sys

from dlrig.accept.load_kit import Meter, emit, run_loop

CHUNK_BYTES = 16 * 1024**2


def cpu_load(seconds: float, interval: float) -> None:
    # A buffer that fits in L2: the core's arithmetic is measured, not memory.
    buffer = os.urandom(256 * 1024)
    emit({"ready": True, "detail": {"work": "SHA-256 over a 256 KiB buffer", "unit": "MB/s"}})

    def step(meter: Meter) -> None:
        hashlib.sha256(buffer).digest()
        meter.rate("hash_mb_s", len(buffer) / 1e6)

    run_loop(seconds, interval, step)


def memory_load(seconds: float, interval: float, size_bytes: int) -> None:
    source = bytearray(os.urandom(1024**2)) * (size_bytes // 1024**2)
    target = bytearray(len(source))
    src = (ctypes.c_char * len(source)).from_buffer(source)
    dst = (ctypes.c_char * len(target)).from_buffer(target)
    emit(
        {
            "ready": True,
            "detail": {"work": f"copies of {len(source) // 1024**2} MiB (read + write bytes)"},
        }
    )

    def step(meter: Meter) -> None:
        ctypes.memmove(dst, src, len(source))
        meter.rate("copy_gb_s", 2 * len(source) / 1e9)

    run_loop(seconds, interval, step)


def disk_load(seconds: float, interval: float, path: str, size_bytes: int) -> None:
    pattern = os.urandom(CHUNK_BYTES)
    chunks = max(1, size_bytes // CHUNK_BYTES)
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError as exc:
        emit({"error": f"cannot create {path}: {exc.strerror}"})
        sys.exit(4)
    emit(
        {
            "ready": True,
            "detail": {
                "file": path,
                "file_bytes": chunks * CHUNK_BYTES,
                "work": "write with fsync, drop from the page cache, read back and compare",
            },
        }
    )
    state = {"chunk": 0, "writing": True, "pass": 0}

    def stamped(index: int) -> bytes:
        # Each chunk carries its index and pass: a read of the wrong place cannot match.
        head = f"{state['pass']:08d}{index:08d}".encode()
        return head + pattern[len(head) :]

    def step(meter: Meter) -> None:
        index = state["chunk"]
        offset = index * CHUNK_BYTES
        if state["writing"]:
            os.pwrite(fd, stamped(index), offset)
            os.fsync(fd)
            meter.rate("write_mb_s", CHUNK_BYTES / 1e6)
        else:
            data = os.pread(fd, CHUNK_BYTES, offset)
            meter.rate("read_mb_s", len(data) / 1e6)
            if data != stamped(index):
                meter.count("mismatched_chunks")
        state["chunk"] = index + 1
        if state["chunk"] >= chunks:
            state["chunk"] = 0
            if state["writing"]:
                # Written and synced: drop it from the cache so the reads come from the disk.
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                state["writing"] = False
            else:
                state["writing"] = True
                state["pass"] += 1

    try:
        run_loop(seconds, interval, step)
    except OSError as exc:
        emit({"error": f"{path}: {exc.strerror or exc}", "errno": exc.errno or 0})
        sys.exit(4)
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m dlrig.accept.worker")
    parser.add_argument("kind", choices=("cpu", "memory", "disk", "gpu"))
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--path")
    parser.add_argument("--bytes", type=int, default=256 * 1024**2)
    parser.add_argument("--uuid")
    parser.add_argument("--index", type=int, default=0)
    args = parser.parse_args(argv)
    if args.kind == "cpu":
        cpu_load(args.seconds, args.interval)
    elif args.kind == "memory":
        memory_load(args.seconds, args.interval, args.bytes)
    elif args.kind == "disk":
        disk_load(args.seconds, args.interval, args.path, args.bytes)
    else:
        from dlrig.accept import worker_gpu  # lazy: bench and torch, for GPU loads only

        worker_gpu.gpu_load(args.seconds, args.interval, args.index, args.uuid)


if __name__ == "__main__":
    main()

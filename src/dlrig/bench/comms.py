"""Collectives through `torch.distributed`: all-reduce, all-gather, reduce-scatter, broadcast.

Time, algorithm bandwidth and bus bandwidth follow nccl-tests' definitions
(https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md): for a buffer of S bytes
(the whole output of all-gather, the whole input of reduce-scatter), algbw = S / t, and
busbw = algbw × 2(n-1)/n for all-reduce, × (n-1)/n for all-gather and reduce-scatter, × 1 for
broadcast, which makes busbw comparable with the link's bandwidth. t is the slowest rank's
average time per operation.

On one machine the ranks are spawned here (NCCL over the GPUs, gloo on the CPU). Across
machines, launch it with torchrun; every rank runs the same code and rank 0 reports:

    torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d --rdzv-endpoint=HOST:29500 \\
        -m dlrig bench comms
"""

from __future__ import annotations

import os
import socket
import time
from datetime import timedelta
from typing import Any

from dlrig.bench.device import BenchDevice, torch_module
from dlrig.bench.results import BenchResult, Progress, judged, no_progress
from dlrig.errors import DlrigError, InputError

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
GLOO_SIZES = tuple(1 << p for p in range(13, 27, 2))  # 8 KiB .. 64 MiB
NCCL_SIZES = tuple(1 << p for p in range(20, 31, 2))  # 1 MiB .. 1 GiB
OK_NVLINK_PERCENT = 60.0
JUDGED_FROM_BYTES = 256 << 20  # nccl-tests reach their bus bandwidth plateau from here


def bus_factor(op: str, ranks: int) -> float:
    if op == "all_reduce":
        return 2.0 * (ranks - 1) / ranks
    if op in ("all_gather", "reduce_scatter"):
        return (ranks - 1) / ranks
    return 1.0


def _size_text(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes:g} B"


def launched_by_torchrun() -> bool:
    """torchrun (torch.distributed.elastic) sets TORCHELASTIC_RUN_ID; RANK and WORLD_SIZE
    alone are also set inside training pods that did not launch dlrig."""
    return "TORCHELASTIC_RUN_ID" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1


def measure(
    sizes: tuple[int, ...],
    iterations: int,
    use_cuda: bool,
    ops: tuple[str, ...] = OPS,
    done: Any = None,
) -> dict[str, list[dict[str, float]]]:
    """Run in every rank of an initialised process group; all ranks get the same table.

    `done(fraction)`, when given, is called after each (op, size) with the share finished."""
    torch = torch_module()
    dist = torch.distributed
    ranks = dist.get_world_size()
    where = f"cuda:{torch.cuda.current_device()}" if use_cuda else "cpu"

    def sync() -> None:
        if use_cuda:
            torch.cuda.synchronize()

    # Newer torch names the tensor forms *_single (the old names warn); older has only those.
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    table: dict[str, list[dict[str, float]]] = {}
    for op in ops:
        rows = []
        for size in sizes:
            count = max(size // 4 // ranks * ranks, ranks)  # float32, divisible by ranks
            full = torch.ones(count, dtype=torch.float32, device=where)
            part = torch.ones(count // ranks, dtype=torch.float32, device=where)

            def run_once(op: str = op, full: Any = full, part: Any = part) -> None:
                if op == "all_reduce":
                    dist.all_reduce(full)
                elif op == "all_gather":
                    gather(full, part)
                elif op == "reduce_scatter":
                    scatter(part, full)
                else:
                    dist.broadcast(full, 0)

            for _ in range(2):
                run_once()
            sync()
            dist.barrier()
            started = time.perf_counter()
            for _ in range(iterations):
                run_once()
            sync()
            elapsed = torch.tensor([(time.perf_counter() - started) / iterations], device=where)
            dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
            seconds = float(elapsed.item())
            nbytes = count * 4
            algbw = nbytes / seconds / 1e9
            rows.append(
                {
                    "bytes": nbytes,
                    "time_us": round(seconds * 1e6, 2),
                    "algbw_gbs": round(algbw, 6),
                    "busbw_gbs": round(algbw * bus_factor(op, ranks), 6),
                }
            )
            del full, part
            if done is not None:
                done((ops.index(op) * len(sizes) + len(rows)) / (len(ops) * len(sizes)))
        table[op] = rows
    return table


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spawned_rank(
    rank: int,
    ranks: int,
    port: int,
    backend: str,
    sizes: tuple[int, ...],
    iterations: int,
    queue: Any,
) -> None:
    torch = torch_module()
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    use_cuda = backend == "nccl"
    if use_cuda:
        torch.cuda.set_device(rank)
    torch.distributed.init_process_group(
        backend, rank=rank, world_size=ranks, timeout=timedelta(seconds=120)
    )
    try:
        report = (lambda fraction: queue.put(("progress", fraction))) if rank == 0 else None
        table = measure(sizes, iterations, use_cuda, done=report)
        if rank == 0:
            queue.put(("table", table))
    finally:
        torch.distributed.destroy_process_group()


def _spawn_ranks(
    ranks: int, backend: str, sizes: tuple[int, ...], iterations: int, progress: Progress
) -> dict[str, list[dict[str, float]]]:
    """Spawn one process per rank on this machine; rank 0 sends progress and the table.

    The parent polls rather than blocking in join(), so progress shows and a stop signal
    (dlrig.lifecycle) lands here: the ranks are then terminated, not left running."""
    import torch.multiprocessing as mp

    queue = mp.get_context("spawn").SimpleQueue()
    context = mp.spawn(  # type: ignore[attr-defined,no-untyped-call]
        _spawned_rank,
        args=(ranks, _free_port(), backend, sizes, iterations, queue),
        nprocs=ranks,
        join=False,
    )
    table: dict[str, list[dict[str, float]]] | None = None

    def drain() -> None:
        nonlocal table
        while not queue.empty():
            kind, value = queue.get()
            if kind == "progress":
                progress(f"comms {backend} ({ranks} ranks)", float(value))
            else:
                table = value

    try:
        while not context.join(timeout=0.2):
            drain()
    except Exception as exc:  # noqa: BLE001 - a rank's failure, with its traceback inside
        lines = [line for line in str(exc).strip().splitlines() if line.strip()]
        raise DlrigError(
            f"the {backend} collectives failed in a worker process: "
            f"{lines[-1] if lines else type(exc).__name__}",
            fix="rerun with NCCL_DEBUG=WARN (GPU) to see why; in containers give "
            "/dev/shm room (--shm-size=8g or --ipc=host)",
        ) from None
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
        for process in context.processes:
            process.join(timeout=5)
    drain()
    if table is None:
        raise DlrigError(
            f"the {backend} collectives ended without a result",
            fix="rerun; if it repeats, run with DLRIG_DEBUG=1 and report it",
        )
    return table


def run(
    device: BenchDevice,
    processes: int | None = None,
    sizes: tuple[int, ...] | None = None,
    iterations: int = 10,
    nvlink_gbs: float | None = None,
    progress: Progress = no_progress,
) -> list[BenchResult]:
    torch = torch_module()
    use_cuda = device.kind == "cuda"
    backend = "nccl" if use_cuda else "gloo"
    sizes = sizes or (NCCL_SIZES if use_cuda else GLOO_SIZES)
    progress(f"comms {backend}", 0.0)
    if launched_by_torchrun():
        dist = torch.distributed
        if use_cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend, timeout=timedelta(seconds=300))
        try:
            ranks = dist.get_world_size()
            table = measure(sizes, iterations, use_cuda)
        finally:
            dist.destroy_process_group()
        where = f"{ranks} ranks launched by torchrun"
    else:
        ranks = processes or (torch.cuda.device_count() if use_cuda else 2)
        if ranks < 2:
            return [
                BenchResult.of(
                    "comms",
                    op,
                    None,
                    "GB/s",
                    verdict="skip",
                    note="one GPU: nothing to communicate on this machine; across machines "
                    "run it under torchrun",
                )
                for op in OPS
            ]
        if use_cuda and ranks > torch.cuda.device_count():
            raise InputError(
                f"--processes {ranks}: this machine has {torch.cuda.device_count()} GPUs",
                fix="one process per GPU at most; across machines use torchrun",
            )
        cores = os.cpu_count() or 1
        capped_from = None
        if not use_cuda and ranks > max(cores, 2):
            # More gloo ranks than cores measure the scheduler, not the collectives, and a
            # 64-rank spawn on 2 cores takes minutes to do it.
            capped_from, ranks = ranks, max(cores, 2)
        table = _spawn_ranks(ranks, backend, sizes, iterations, progress)
        where = f"{ranks} processes on this machine"
        if capped_from is not None:
            where += f" (asked for {capped_from}; capped at the {cores} CPU cores there are)"
    # Expectation: NVLink's one-way bandwidth for NCCL within a machine; none for gloo or
    # across machines (the network decides, and dlrig does not know its rate).
    expected = nvlink_gbs / 2 if use_cuda and nvlink_gbs and not launched_by_torchrun() else None
    if max(sizes) < JUDGED_FROM_BYTES:
        expected = None  # small messages are latency-bound: no fair bandwidth verdict
    results = []
    for op in OPS:
        rows = table[op]
        best = max(rows, key=lambda r: r["busbw_gbs"])
        note = (
            f"{backend}, {where}; busbw at {_size_text(best['bytes'])} "
            f"(nccl-tests definition); smallest message {rows[0]['time_us']:.0f} µs"
        )
        if backend == "gloo" and op == "reduce_scatter":
            note += (
                "; gloo has no native reduce-scatter (torch emulates it): not comparable to NCCL"
            )
        results.append(
            judged(
                "comms",
                op,
                best["busbw_gbs"],
                "GB/s",
                expected,
                OK_NVLINK_PERCENT,
                "collectives run well below NVLink's bandwidth: check `nvidia-smi topo -m` and "
                "`nvidia-smi nvlink -s`, and NCCL_P2P_DISABLE / NCCL_SHM_DISABLE in the "
                "environment; rerun with NCCL_DEBUG=INFO to see the transport",
                note,
                detail={"ranks": ranks, "backend": backend, "sizes": rows},
            )
        )
    progress("comms", 1.0)
    return results

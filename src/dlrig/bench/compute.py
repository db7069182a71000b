"""Matrix-multiply throughput per dtype over sizes, against the catalogue's dense peak.

C = A @ B with square N×N operands costs 2·N³ FLOPs. Each size runs for a fixed time after a
warm-up; the best size is the figure (large matmuls are the kernels training spends its time
in). On a GPU the timing brackets CUDA events around a batch of launches; on the CPU it is
wall time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from dlrig.bench.device import BenchDevice, torch_module
from dlrig.bench.results import BenchResult, Progress, judged, no_progress

GPU_SIZES = (1024, 2048, 4096, 8192, 16384)
CPU_SIZES = (256, 512, 1024, 2048)
OK_AT_PERCENT = 60.0  # good GEMM libraries reach 70-80% of the marketed dense peak

_FIX = (
    "the GPU computes well below its peak: check its clocks, power limit and throttling "
    "(`dlrig monitor`, `nvidia-smi -q -d PERFORMANCE,POWER`), that nothing else runs on it, "
    "and that persistence mode is on (`sudo nvidia-smi -pm 1`)"
)


def dtypes_for(device: BenchDevice) -> tuple[str, ...]:
    if device.kind == "cpu":
        return ("fp32", "bf16")
    major, minor = device.compute_capability or (0, 0)
    found = ["fp32", "fp16"]
    if major >= 8:
        found[1:1] = ["tf32"]
        found.append("bf16")
    if (major, minor) >= (8, 9):
        found.append("fp8")
    return tuple(found)


@contextlib.contextmanager
def _tf32(torch: Any, enabled: bool) -> Iterator[None]:
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def _operands(torch: Any, device: BenchDevice, dtype: str, n: int) -> tuple[Any, Any, Any]:
    """(A, B, function computing A@B once)."""
    where = device.torch_device
    if dtype == "fp8":
        a = torch.randn(n, n, device=where).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=where).to(torch.float8_e4m3fn).t()  # column-major for cuBLASLt
        one = torch.tensor(1.0, device=where)

        def fp8() -> Any:
            # Fast accumulation, as Transformer Engine uses for forward GEMMs.
            return torch._scaled_mm(
                a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
            )

        return a, b, fp8
    torch_dtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16}.get(
        dtype, torch.bfloat16
    )
    a = torch.randn(n, n, device=where, dtype=torch_dtype)
    b = torch.randn(n, n, device=where, dtype=torch_dtype)
    return a, b, lambda: torch.matmul(a, b)


def significant(tflops: float, digits: int = 4) -> float:
    """`tflops` to `digits` significant figures: a fixed number of decimals would give a CPU's
    small matmuls (a few GFLOP/s, i.e. 0.000x TFLOP/s) as 0.0."""
    return float(f"{tflops:.{digits}g}")


def _time_tflops(torch: Any, device: BenchDevice, dtype: str, n: int, seconds: float) -> float:
    if device.kind == "cuda":
        # Events record on the current device's stream: make it the measured GPU's.
        with torch.cuda.device(device.index):
            return _timed(torch, device, dtype, n, seconds)
    return _timed(torch, device, dtype, n, seconds)


def _timed(torch: Any, device: BenchDevice, dtype: str, n: int, seconds: float) -> float:
    _, _, matmul = _operands(torch, device, dtype, n)
    flops = 2.0 * n**3
    for _ in range(3):
        matmul()
    device.synchronize()
    if device.kind == "cuda":
        # Launch batches between events until the time budget is spent.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        batch = 10
        total_ms = 0.0
        count = 0
        while total_ms < seconds * 1000:
            start.record()
            for _ in range(batch):
                matmul()
            end.record()
            end.synchronize()
            total_ms += start.elapsed_time(end)
            count += batch
        return flops * count / (total_ms / 1000) / 1e12
    started = time.perf_counter()
    count = 0
    while time.perf_counter() - started < seconds:
        matmul()
        count += 1
    return flops * count / (time.perf_counter() - started) / 1e12


def run(
    device: BenchDevice,
    sizes: tuple[int, ...] | None = None,
    seconds_per_size: float = 0.5,
    dtypes: tuple[str, ...] | None = None,
    progress: Progress = no_progress,
) -> list[BenchResult]:
    torch = torch_module()
    sizes = sizes or (GPU_SIZES if device.kind == "cuda" else CPU_SIZES)
    chosen = dtypes or dtypes_for(device)
    results = []
    steps = len(chosen) * len(sizes)
    done = 0
    for dtype in chosen:
        per_size: dict[str, float] = {}
        error = None
        for n in sizes:
            progress(f"compute {dtype} {n}×{n}", done / steps)
            done += 1
            try:
                with _tf32(torch, dtype == "tf32"):
                    per_size[str(n)] = significant(
                        _time_tflops(torch, device, dtype, n, seconds_per_size)
                    )
            except (RuntimeError, TypeError, AttributeError) as exc:
                # Out of memory at the largest size, or a dtype this build cannot multiply.
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                break
            finally:
                if device.kind == "cuda":
                    torch.cuda.empty_cache()  # leave the memory to the next size and part
        if not per_size:
            results.append(
                BenchResult(
                    "compute", f"{dtype}_matmul", None, "TFLOP/s", verdict="skip", note=error
                )
            )
            continue
        best = max(per_size.values())
        peak = device.spec.peak_tflops(dtype) if device.spec is not None else None
        where = device.spec.id if device.spec is not None else device.name
        note = (
            f"best of N×N matmuls N={','.join(per_size)} on {where}"
            + (f"; dense peak {peak:g} TFLOP/s from the GPU catalogue" if peak else "")
            + ("; the catalogue has no CPU peaks" if device.kind == "cpu" else "")
        )
        results.append(
            judged(
                "compute",
                f"{dtype}_matmul",
                best,
                "TFLOP/s",
                peak,
                OK_AT_PERCENT,
                _FIX,
                note,
                cause="gpu_throttling",
                detail={"tflops_by_size": per_size, **({"stopped": error} if error else {})},
            )
        )
    progress("compute", 1.0)
    return results

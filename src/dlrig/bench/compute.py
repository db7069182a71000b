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
from typing import Any, NamedTuple

from dlrig.bench.device import BenchDevice, torch_module
from dlrig.bench.results import BenchResult, Progress, judged, no_progress
from dlrig.knowledge.versions import Version

GPU_SIZES = (1024, 2048, 4096, 8192, 16384)
CPU_SIZES = (256, 512, 1024, 2048)
OK_AT_PERCENT = 60.0  # good GEMM libraries reach 70-80% of the marketed dense peak

_FIX = (
    "the GPU computes well below its peak: check its clocks, power limit and throttling "
    "(`dlrig monitor`, `nvidia-smi -q -d PERFORMANCE,POWER`), that nothing else runs on it, "
    "and that persistence mode is on (`sudo nvidia-smi -pm 1`)"
)


def _rocm_fp8(device: BenchDevice) -> bool:
    """torch's own rule for FP8 GEMMs on a HIP build (`evaluate_platform_supports_fp8` in
    torch.testing._internal.common_cuda): gfx94x; gfx120x from ROCm 6.3; gfx95x from 6.5."""
    gfx = device.gfx_target or ""
    hip = Version.parse(device.hip_version)
    rocm = hip.padded(2).parts[:2] if hip is not None else (0, 0)
    return (
        "gfx94" in gfx
        or ("gfx120" in gfx and rocm >= (6, 3))
        or ("gfx95" in gfx and rocm >= (6, 5))
    )


def _fp8_dtype(torch: Any, device: BenchDevice) -> Any:
    """MI300's FP8 is the FNUZ variant (no negative zero, one NaN); gfx950 and NVIDIA use OCP's
    e4m3fn (torch.testing._internal.common_device_type's e4m3_type)."""
    if device.platform == "rocm" and "gfx94" in (device.gfx_target or ""):
        return torch.float8_e4m3fnuz
    return torch.float8_e4m3fn


def dtypes_for(device: BenchDevice) -> tuple[str, ...]:
    if device.kind == "cpu":
        return ("fp32", "bf16")
    if device.platform == "rocm":
        # No "tf32": torch's allow_tf32 is a cuBLAS switch; hipBLASLt's XF32 is gfx942-only and
        # off unless an environment variable asks for it.
        return ("fp32", "fp16", "bf16", *(("fp8",) if _rocm_fp8(device) else ()))
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
        fp8_dtype = _fp8_dtype(torch, device)
        a = torch.randn(n, n, device=where).to(fp8_dtype)
        b = torch.randn(n, n, device=where).to(fp8_dtype).t()  # column-major for cuBLASLt
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


class Timing(NamedTuple):
    tflops: float
    seconds_per_matmul: float
    elapsed: float  # warm-up included: what the size cost the budget


def _time_tflops(
    torch: Any, device: BenchDevice, dtype: str, n: int, seconds: float, warmups: int = 3
) -> Timing:
    if device.kind == "cuda":
        # Events record on the current device's stream: make it the measured GPU's.
        with torch.cuda.device(device.index):
            return _timed(torch, device, dtype, n, seconds, warmups)
    return _timed(torch, device, dtype, n, seconds, warmups)


def _timed(
    torch: Any, device: BenchDevice, dtype: str, n: int, seconds: float, warmups: int
) -> Timing:
    began = time.perf_counter()
    _, _, matmul = _operands(torch, device, dtype, n)
    flops = 2.0 * n**3
    for _ in range(warmups):
        matmul()
    device.synchronize()
    warm = (time.perf_counter() - began) / max(warmups, 1)  # a first guess at one matmul
    if device.kind == "cuda":
        # Launch batches between events until the time budget is spent; a batch never much
        # longer than what is left of it.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        total_ms = 0.0
        count = 0
        per_call = warm
        while total_ms < seconds * 1000 or count == 0:
            left = max(seconds - total_ms / 1000, per_call)
            batch = max(1, min(10, int(left / max(per_call, 1e-6))))
            start.record()
            for _ in range(batch):
                matmul()
            end.record()
            end.synchronize()
            total_ms += start.elapsed_time(end)
            count += batch
            per_call = total_ms / 1000 / count
        return Timing(
            flops * count / (total_ms / 1000) / 1e12, per_call, time.perf_counter() - began
        )
    started = time.perf_counter()
    count = 0
    while time.perf_counter() - started < seconds or count == 0:
        matmul()
        count += 1
    took = time.perf_counter() - started
    return Timing(flops * count / took / 1e12, took / count, time.perf_counter() - began)


# A dtype this much slower per FLOP than fp32 at the same size has no native support here
# (bf16 on a CPU without AVX512-BF16/AMX is emulated: 100x and more).
EMULATED_AT = 4.0


def _fits(previous: Timing | None, previous_n: int, n: int, left: float | None) -> bool:
    """Whether size n, predicted from the last size by N³, fits in what is left of the budget
    (one warm-up and two timed matmuls at least)."""
    if left is None or previous is None:
        return True
    predicted = previous.seconds_per_matmul * (n / previous_n) ** 3
    return 3 * predicted <= left


def run(
    device: BenchDevice,
    sizes: tuple[int, ...] | None = None,
    seconds_per_size: float = 0.5,
    dtypes: tuple[str, ...] | None = None,
    progress: Progress = no_progress,
    budget_seconds: float | None = None,
) -> list[BenchResult]:
    """Best matmul TFLOP/s per dtype. With `budget_seconds` the whole part fits in it, warm-ups
    included: each dtype gets an equal share, and a size runs only where the last size's time
    scaled by N³ says it fits (so a slow dtype stops at a small size instead of running for
    minutes)."""
    torch = torch_module()
    sizes = sizes or (GPU_SIZES if device.kind == "cuda" else CPU_SIZES)
    chosen = dtypes or dtypes_for(device)
    results = []
    steps = len(chosen) * len(sizes)
    done = 0
    fp32_first: Timing | None = None  # fp32 at the first size, to tell an emulated dtype
    used = 0.0
    for position, dtype in enumerate(chosen):
        per_size: dict[str, float] = {}
        error = None
        # What the earlier dtypes left goes to the later ones.
        share = (
            None if budget_seconds is None else (budget_seconds - used) / (len(chosen) - position)
        )
        spent = 0.0
        previous: Timing | None = None
        previous_n = sizes[0]
        left_out: list[int] = []
        slower = None
        for n in sizes:
            progress(f"compute {dtype} {n}×{n}", done / steps)
            done += 1
            left = None if share is None else share - spent
            if left_out or not _fits(previous, previous_n, n, left):
                left_out.append(n)
                continue
            trial = seconds_per_size if left is None else max(min(seconds_per_size, left / 3), 0.0)
            try:
                with _tf32(torch, dtype == "tf32"):
                    timing = _time_tflops(
                        torch, device, dtype, n, trial, warmups=3 if share is None else 1
                    )
            except (RuntimeError, TypeError, AttributeError) as exc:
                # Out of memory at the largest size, or a dtype this build cannot multiply.
                error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                break
            finally:
                if device.kind == "cuda":
                    torch.cuda.empty_cache()  # leave the memory to the next size and part
            spent += timing.elapsed
            per_size[str(n)] = significant(timing.tflops)
            if n == sizes[0]:
                if dtype == "fp32":
                    fp32_first = timing
                elif fp32_first is not None and timing.tflops > 0:
                    slower = fp32_first.tflops / timing.tflops
            previous, previous_n = timing, n
        used += spent
        if not per_size:
            results.append(
                BenchResult.of(
                    "compute", f"{dtype}_matmul", None, "TFLOP/s", verdict="skip", note=error
                )
            )
            continue
        results.append(_result(device, dtype, per_size, error, left_out, slower, share))
    progress("compute", 1.0)
    return results


def _result(
    device: BenchDevice,
    dtype: str,
    per_size: dict[str, float],
    error: str | None,
    left_out: list[int],
    slower: float | None,
    share: float | None,
) -> BenchResult:
    best = max(per_size.values())
    peak = device.spec.peak_tflops(dtype) if device.spec is not None else None
    where = device.spec.id if device.spec is not None else device.name
    note = (
        f"best of N×N matmuls N={','.join(per_size)} on {where}"
        + (f"; dense peak {peak:g} TFLOP/s from the GPU catalogue" if peak else "")
        + ("; the catalogue has no CPU peaks" if device.kind == "cpu" else "")
    )
    if slower is not None and slower >= EMULATED_AT:
        note += (
            f"; {slower:.0f}x slower than fp32 at N={next(iter(per_size))}: no native {dtype} "
            "on this device (emulated), so it says little about training speed"
        )
    if left_out:
        note += (
            f"; N={','.join(map(str, left_out))} left out: predicted past the "
            f"{share:.0f} s this dtype had (--quick)"
        )
    return judged(
        "compute",
        f"{dtype}_matmul",
        best,
        "TFLOP/s",
        peak,
        OK_AT_PERCENT,
        _FIX,
        note,
        cause="gpu_throttling",
        detail={
            "tflops_by_size": per_size,
            **({"stopped": error} if error else {}),
            **({"left_out_sizes": left_out} if left_out else {}),
        },
    )

"""The GPU burn-in load: matmuls at the GPU's peak dtype, with device-memory copies between.

The dtype is the one with the highest dense peak in the GPU catalogue among those the GPU can
multiply (`bench.compute.dtypes_for`: fp8 on sm_89 and newer, bf16 on sm_80 and newer, ...); a
GPU the catalogue does not know gets bf16 where it has it, else fp16. Every few matmuls one
large device-to-device copy keeps the memory system busy too, as a training step does. Each
interval the worker synchronises and reports the TFLOP/s and copy GB/s it reached, so a GPU
that slows down over the burn-in shows in its own figures, not only in its clocks.
"""

from __future__ import annotations

import os
from typing import Any

from dlrig.accept.load_kit import Meter, emit, run_loop

MATRIX_N = 8192  # 2·N³ = 1.1 TFLOP per matmul: milliseconds on any datacenter GPU
COPY_EVERY = 8  # matmuls between two device-memory copies
COPY_SHARE_OF_FREE = 0.25  # the copy buffers take at most this share of free memory
COPY_MAX_BYTES = 4 * 1024**3


def _device(torch: Any, index: int, uuid: str | None) -> int:
    """The torch device for the NVML GPU: by UUID (CUDA_VISIBLE_DEVICES may renumber them),
    else by index."""
    if uuid:
        wanted = uuid.lower().removeprefix("gpu-")
        for i in range(torch.cuda.device_count()):
            found = str(getattr(torch.cuda.get_device_properties(i), "uuid", "")).lower()
            if found.removeprefix("gpu-") == wanted:
                return i
    if not 0 <= index < torch.cuda.device_count():
        raise RuntimeError(f"torch sees {torch.cuda.device_count()} GPU(s), not GPU {index}")
    return index


def _peak_dtype(device: Any) -> tuple[str, float | None]:
    from dlrig.bench import compute  # lazy: inside gpu_load's try, which reports any failure

    usable = [d for d in compute.dtypes_for(device) if d != "fp32"]
    spec = device.spec
    if spec is not None:
        ranked = [(spec.peak_tflops(d) or 0.0, d) for d in usable]
        best_peak, best = max(ranked)
        if best_peak:
            return best, best_peak
    return ("bf16" if "bf16" in usable else "fp16"), None


def gpu_load(seconds: float, interval: float, index: int, uuid: str | None) -> None:
    try:
        import torch

        from dlrig.bench import pick_device  # lazy: a failure here is reported as JSON, too

        if not torch.cuda.is_available():
            build = getattr(torch.version, "cuda", None)
            raise RuntimeError(
                f"torch {torch.__version__} cannot use a GPU here"
                + ("" if build else " (a CPU-only build)")
            )
        torch_index = _device(torch, index, uuid)
        device = pick_device("cuda", torch_index)
        dtype, peak = _peak_dtype(device)
        torch.cuda.set_device(torch_index)
        where = f"cuda:{torch_index}"
        matmul = _matmul(torch, where, dtype)
        free, _ = torch.cuda.mem_get_info(torch_index)
        copy_bytes = int(min(free * COPY_SHARE_OF_FREE, COPY_MAX_BYTES)) // 2
        source = torch.empty(copy_bytes // 4, dtype=torch.float32, device=where).uniform_()
        target = torch.empty_like(source)
        matmul()
        torch.cuda.synchronize(torch_index)
    except Exception as exc:  # noqa: BLE001 - every reason is reported to the parent
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        emit({"error": f"{type(exc).__name__}: {first}"})
        raise SystemExit(3) from None
    emit(
        {
            "ready": True,
            "detail": {
                "device": device.name,
                "torch_index": torch_index,
                "catalogue_id": device.spec.id if device.spec else None,
                "dtype": dtype,
                "peak_tflops": peak,
                "matrix_n": MATRIX_N,
                "copy_bytes": 2 * source.numel() * 4,
                "pid": os.getpid(),
            },
        }
    )
    flops = 2.0 * MATRIX_N**3
    copied = 2 * source.numel() * 4  # read + write

    def step(meter: Meter) -> None:
        # Launch a batch, then wait for it: the interval's figure is work the GPU finished.
        for _ in range(COPY_EVERY):
            matmul()
        target.copy_(source)
        torch.cuda.synchronize(torch_index)
        meter.rate("tflops", flops * COPY_EVERY / 1e12)
        meter.rate("copy_gb_s", copied / 1e9)

    run_loop(seconds, interval, step)


def _matmul(torch: Any, where: str, dtype: str) -> Any:
    n = MATRIX_N
    if dtype == "fp8":
        a = torch.randn(n, n, device=where).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=where).to(torch.float8_e4m3fn).t()
        one = torch.tensor(1.0, device=where)
        return lambda: torch._scaled_mm(
            a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
        )
    torch_dtype = {"fp16": torch.float16, "tf32": torch.float32}.get(dtype, torch.bfloat16)
    if dtype == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
    a = torch.randn(n, n, device=where, dtype=torch_dtype)
    b = torch.randn(n, n, device=where, dtype=torch_dtype)
    out = torch.empty(n, n, device=where, dtype=torch_dtype)
    return lambda: torch.matmul(a, b, out=out)

"""The change that wins most, from the measured split: each candidate cause gets the step time
it would save if its share of the step went away (or shrank by what the fix is known to do),
and the largest saving is the verdict. The causes are `dlrig.causes` ids, the same that
`diagnose`, `bench` and `monitor` use.

A finding needs both a share of the step worth acting on and a gain of at least 5 %: below
that, run-to-run noise in a few profiled steps is as large as the effect.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from dlrig import causes
from dlrig.profile.model import Finding, RankProfile

MIN_GAIN = 1.05
MIN_SHARE = 0.10
# An FP32 GEMM moved to bf16/fp16 tensor cores: at least this much faster even where the
# peak ratio is unknown (dense bf16 over fp32 is 2x on CPUs with AMX-less AVX-512 BF16 and
# 8-16x on datacenter GPUs).
FP32_TO_BF16_MIN = 2.0
# foreach/fused optimizers cut the optimizer's GPU time by half or more (PyTorch's own
# benchmarks in the foreach RFC show 2-5x); half is the claim made here.
FUSED_OPTIMIZER_SAVES = 0.5
STRAGGLER_SPREAD = 0.10
BEYOND_WORKERS = (
    "If workers cannot keep up, move decoding to the GPU (DALI, torchvision.io on CUDA) or "
    "pre-pack the dataset into large shards on local NVMe (`dlrig pack`); `dlrig bench "
    "dataloader` finds the best settings."
)  # a rank this much slower in compute than the median is named


def _lower(title: str) -> str:
    return title[:1].lower() + title[1:]


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:.0f}%" if whole > 0 else "n/a"


MAX_GAIN = 100.0  # a step that is nearly all one part: say "up to x100", never infinity


def _speedup(step: float, saved: float) -> float:
    left = step - saved
    return min(step / left, MAX_GAIN) if left > 0 else MAX_GAIN


def findings(ranks: Sequence[RankProfile], peak_ratio: float | None = None) -> list[Finding]:
    """Every cause the split points at, the largest expected gain first."""
    ranks = [r for r in ranks if r.steps]
    if not ranks:
        return []
    step = statistics.fmean(r.mean("step_ms") for r in ranks)
    if step <= 0:
        return []
    gpu = all(r.has_gpu for r in ranks)
    out: list[Finding] = []

    def mean(key: str, part: str | None = None) -> float:
        return statistics.fmean(r.mean(key, part) for r in ranks)

    wait = mean("gpu", "idle_data_wait") if gpu else mean("host", "data_wait")
    host_wait = mean("host", "data_wait")
    if wait / step >= MIN_SHARE:
        cause = causes.get("input_pipeline_bound")
        evidence = [
            f"data wait {host_wait:.1f} ms of a {step:.1f} ms step ({_pct(host_wait, step)})"
        ]
        if gpu:
            evidence.append(f"the GPU is idle for {wait:.1f} ms of it")
        loaders = {r.loader for r in ranks}
        fix = cause.default_fix
        cpus = min((r.cpus_per_rank for r in ranks if r.cpus_per_rank), default=None)
        workers = f"num_workers={min(cpus, 16)}" if cpus else "num_workers=4 or more"
        if "main process" in loaders:
            evidence.append("the DataLoader loads in the main process (num_workers=0)")
            fix = (
                f"Set DataLoader(..., {workers}, pin_memory=True, persistent_workers=True) so "
                "batches load in worker processes while the step runs. " + BEYOND_WORKERS
            )
        elif "worker processes" in loaders:
            evidence.append("the DataLoader's workers do not keep up")
            fix = (
                f"Raise num_workers (this rank has {cpus} CPU cores) and prefetch_factor. "
                if cpus
                else "Raise num_workers and prefetch_factor. "
            ) + BEYOND_WORKERS
        out.append(
            Finding.of(
                cause.id,
                "Input-bound: " + (_lower(cause.title) if gpu else "the step waits for data"),
                tuple(evidence),
                fix,
                _speedup(step, wait),
                "the step without its data wait (workers that keep up hide it entirely)",
            )
        )
    if gpu:
        idle_host = mean("gpu", "idle_host")
        if idle_host / step >= MIN_SHARE:
            cause = causes.get("launch_bound")
            launch = mean("launch_ms")
            kernels = mean("kernels")
            out.append(
                Finding.of(
                    cause.id,
                    "Launch-bound: " + _lower(cause.title),
                    (
                        f"GPU idle {idle_host:.1f} ms of a {step:.1f} ms step "
                        f"({_pct(idle_host, step)}) while the host was not waiting for data",
                        f"{kernels:.0f} kernels per step; {launch:.1f} ms of host time "
                        "inside launch calls",
                    ),
                    cause.default_fix,
                    _speedup(step, idle_host),
                    "the step without the GPU's idle time outside data wait (CUDA graphs "
                    "remove launch gaps; host synchronisations must go too)",
                )
            )
        exposed = mean("gpu", "communication_exposed")
        if exposed / step >= MIN_SHARE:
            cause = causes.get("communication_exposed")
            total = mean("communication_ms")
            out.append(
                Finding.of(
                    cause.id,
                    "Communication-bound: " + _lower(cause.title),
                    (
                        f"communication {total:.1f} ms per step, {exposed:.1f} ms of it with no "
                        f"compute beside it ({_pct(exposed, step)} of the step)",
                    ),
                    cause.default_fix,
                    _speedup(step, exposed),
                    "the step with all communication hidden under compute",
                )
            )
        out.extend(_precision(ranks, step, peak_ratio))
        out.extend(_optimizer(ranks, step))
    out = [f for f in out if f.gain >= MIN_GAIN]
    out.sort(key=lambda f: -f.gain)
    return out


def _precision(
    ranks: Sequence[RankProfile], step: float, peak_ratio: float | None
) -> list[Finding]:
    fp32_share = statistics.fmean(r.gemm_precision.get("fp32", 0.0) for r in ranks)
    gemm_ms = statistics.fmean(r.categories.get("gemm", 0.0) for r in ranks) / max(
        1, statistics.fmean(len(r.steps) for r in ranks)
    )
    fp32_ms = fp32_share * gemm_ms
    if fp32_share < 0.5 or fp32_ms / step < MIN_SHARE:
        return []
    ratio = max(FP32_TO_BF16_MIN, peak_ratio or FP32_TO_BF16_MIN)
    saved = fp32_ms * (1.0 - 1.0 / ratio)
    cause = causes.get("fp32_matmuls")
    return [
        Finding.of(
            cause.id,
            cause.title,
            (
                f"{_pct(fp32_share, 1.0)} of GEMM time is in FP32 kernels: {fp32_ms:.1f} ms of "
                f"a {step:.1f} ms step",
            ),
            cause.default_fix,
            _speedup(step, saved),
            f"FP32 GEMM time divided by {ratio:.1f} (the GPU's dense bf16/fp32 peak ratio"
            + ("" if peak_ratio else ", taken at its floor: the GPU is not in the catalogue")
            + ")",
        )
    ]


def _optimizer(ranks: Sequence[RankProfile], step: float) -> list[Finding]:
    if not all(r.optimizer_fused is False for r in ranks):
        return []
    optimizer = statistics.fmean(
        statistics.fmean(s.launched_in.get("optimizer", 0.0) for s in r.steps) for r in ranks
    )
    if optimizer / step < MIN_SHARE / 2:
        return []
    cause = causes.get("optimizer_unfused")
    return [
        Finding.of(
            cause.id,
            cause.title,
            (
                f"optimizer kernels take {optimizer:.1f} ms per step ({_pct(optimizer, step)}), "
                "none of them multi-tensor (foreach/fused)",
            ),
            cause.default_fix,
            _speedup(step, optimizer * FUSED_OPTIMIZER_SAVES),
            "the optimizer's GPU time halved (foreach/fused kernels)",
        )
    ]


def stragglers(ranks: Sequence[RankProfile]) -> list[str]:
    """Ranks whose busy time (the step less its exposed communication and idle time) is above
    the median by more than STRAGGLER_SPREAD: the others wait for them in every collective."""
    measured = [r for r in ranks if r.steps and r.has_gpu and r.rank is not None]
    if len(measured) < 2:
        return []

    def busy(r: RankProfile) -> float:
        return r.mean("gpu", "compute") + r.mean("gpu", "memcpy")

    median = statistics.median(busy(r) for r in measured)
    if median <= 0:
        return []
    out = []
    for r in measured:
        extra = busy(r) / median - 1.0
        if extra > STRAGGLER_SPREAD:
            waits = statistics.median(x.mean("gpu", "communication_exposed") for x in measured)
            out.append(
                f"rank {r.rank} ({r.path}): {busy(r):.1f} ms busy per step, "
                f"{100 * extra:.0f}% above the median {median:.1f} ms; the other ranks wait "
                f"in communication ({waits:.1f} ms exposed, median)"
            )
    return out

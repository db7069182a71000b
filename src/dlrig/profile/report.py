"""A run's report from its traces: each rank analysed, then the verdict across ranks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from dlrig.errors import InputError
from dlrig.knowledge import gpus
from dlrig.profile import analysis, trace, verdict
from dlrig.profile.model import ProfileReport, RankProfile


def analyse(
    paths: Sequence[Path | str],
    flops_per_step: float | None = None,
    flops_source: str | None = None,
    command: Sequence[str] | None = None,
    exit_code: int | None = None,
) -> ProfileReport:
    """The report for one run's traces (one file per rank)."""
    paths = expand(paths)
    profiles = []
    for path in paths:
        loaded = trace.load(path)
        if not loaded.steps:
            raise InputError(
                f"{path}: the trace has no training steps (no ProfilerStep#N annotation)",
                fix="profile with torch.profiler.profile(schedule=...) and call prof.step() "
                "once per step, or run the job under `dlrig profile -- CMD`",
            )
        profiles.append(analysis.analyse(loaded, flops_per_step, flops_source))
    return build(profiles, command=command, exit_code=exit_code)


# What torch.profiler writes: export_chrome_trace's file, tensorboard_trace_handler's
# HOST_PID.TIMESTAMP.pt.trace.json[.gz], dlrig's trace-rankN.json.gz (trace-pidN where a process
# had no rank).
TRACE_PATTERNS = ("trace-*.json.gz", "*.pt.trace.json.gz", "*.pt.trace.json", "*.json.gz")


def expand(paths: Sequence[Path | str]) -> list[Path]:
    """The trace files: a folder stands for the traces in it (one per rank)."""
    if not paths:
        raise InputError("no trace given", fix="dlrig profile TRACE.json[.gz] ...")
    out: list[Path] = []
    for given in paths:
        path = Path(given)
        if not path.is_dir():
            out.append(path)
            continue
        found: list[Path] = []
        for pattern in TRACE_PATTERNS:
            found = sorted(path.glob(pattern))
            if found:
                break
        if not found:
            raise InputError(
                f"{path}: no traces in this folder (trace-*.json.gz, *.pt.trace.json[.gz])",
                fix="give the folder `dlrig profile --out DIR` or tensorboard_trace_handler "
                "wrote, or the trace files",
            )
        out.extend(found)
    return out


def build(
    profiles: Sequence[RankProfile],
    command: Sequence[str] | None = None,
    exit_code: int | None = None,
    notes: Sequence[str] = (),
) -> ProfileReport:
    """The report from ranks already analysed: the verdict, the other findings, stragglers."""
    ranked = sorted(profiles, key=lambda p: (p.rank is None, p.rank or 0, p.path))
    found = verdict.findings(ranked, _peak_ratio(ranked))
    return ProfileReport(
        ranks=tuple(ranked),
        verdict=found[0] if found else None,
        findings=tuple(found),
        stragglers=tuple(verdict.stragglers(ranked)),
        command=tuple(command) if command is not None else None,
        exit_code=exit_code,
        notes=tuple(notes),
    )


def _peak_ratio(profiles: Sequence[RankProfile]) -> float | None:
    """The bf16 (else fp16) over fp32 dense peak of the profiled GPU, from the catalogue."""
    for profile in profiles:
        if profile.mfu.gpu is None:
            continue
        spec = gpus.catalogue().get(profile.mfu.gpu)
        if spec is None:
            continue
        low = spec.peak_tflops("bf16") or spec.peak_tflops("fp16")
        fp32 = spec.peak_tflops("fp32")
        if low and fp32:
            return low / fp32
    return None

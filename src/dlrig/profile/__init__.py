"""`dlrig profile`: where each training step's time goes, and the one change that wins most.

    from dlrig import profile
    report = profile.run(profile.ProfileOptions(("rank0.json.gz", "rank1.json.gz")))  # Kineto traces
    report.verdict.cause, report.verdict.fix, report.verdict.gain

    with profile.Session(steps=5, out="prof") as session:   # in your own loop
        for batch in loader:
            ...
            optimizer.step()                                # each step ends a profiled step
    session.report.verdict

`dlrig profile -- python train.py` does the same for a script it runs (dlrig/profile/live.py).
Importing this package does not import torch; a `Session` imports it when it starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dlrig.profile.hook import Session
from dlrig.profile.model import (
    SCHEMA,
    SCHEMA_VERSION,
    Finding,
    KernelRow,
    ProfileReport,
    RankProfile,
    StepProfile,
)
from dlrig.profile.report import analyse, build
from dlrig.report import Progress, no_progress

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "Finding",
    "KernelRow",
    "ProfileOptions",
    "ProfileReport",
    "RankProfile",
    "Session",
    "StepProfile",
    "analyse",
    "build",
    "run",
]


@dataclass(frozen=True)
class ProfileOptions:
    """The traces of one run (one per rank, or a folder of them) and, where known, the FLOPs of
    one step (for MFU) and where that figure came from."""

    paths: Sequence[Path | str]
    flops_per_step: float | None = None
    flops_source: str | None = None


def run(options: ProfileOptions, *, progress: Progress = no_progress) -> ProfileReport:
    """Where each step's time goes in the traces of `options` and the change that wins most
    (`dlrig profile --json TRACES`). No `machine`: the traces say what ran."""
    progress("profile: reading the traces", 0.0)
    report = analyse(options.paths, options.flops_per_step, options.flops_source)
    progress("profile: done", 1.0)
    return report

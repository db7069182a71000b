"""`dlrig profile`: where each training step's time goes, and the one change that wins most.

    from dlrig import profile
    report = profile.analyse(["rank0.json.gz", "rank1.json.gz"])   # Kineto traces
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

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "Finding",
    "KernelRow",
    "ProfileReport",
    "RankProfile",
    "Session",
    "StepProfile",
    "analyse",
    "build",
]

"""A cause: its id, title, explanation and default fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    id: str
    title: str
    explanation: str
    default_fix: str
    # False for causes that slow a run without crashing it (found by monitor and bench, never
    # in a crash log by diagnose).
    crashes: bool = True
    # True for a cause that names what the log says when the log does not say more (NCCL's
    # "unhandled system error"): an honest headline, never the confirmed cause of a thread.
    generic: bool = False

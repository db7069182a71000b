"""One acceptance verdict: pass, warn, fail or skip, with its evidence, fix and cause."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlrig import causes

STATUSES = ("fail", "warn", "pass", "skip")
SOURCES = ("burn-in", "monitor", "bench", "doctor", "fit", "profile")  # this order, at one status


@dataclass(frozen=True)
class Verdict:
    id: str  # "burn_in.throttle", "bench.compute.bf16_matmul", "doctor.gpu.pcie_width"
    status: str  # fail | warn | pass | skip
    title: str
    source: str  # burn-in | bench | doctor
    evidence: tuple[str, ...] = ()
    fix: str | None = None
    cause: str | None = None  # from dlrig.causes
    gpu: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "title": self.title,
            "source": self.source,
            "gpu": self.gpu,
            "evidence": list(self.evidence),
            "fix": self.fix,
            "cause": self.cause,
            "cause_title": causes.CAUSES[self.cause].title if self.cause in causes.CAUSES else None,
        }


def fix_for(cause: str, specific: str | None = None) -> str:
    """The fix for this finding: its own words where it has them, else the cause's default."""
    return specific or causes.get(cause).default_fix


def rank(status: str) -> int:
    return STATUSES.index(status) if status in STATUSES else len(STATUSES)

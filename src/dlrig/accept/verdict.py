"""One acceptance verdict: pass, warn, fail or skip, with its evidence, fix and cause."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlrig import causes
from dlrig.report import Finding, Status, gpu_subject

STATUSES = ("fail", "warn", "pass", "skip")
SOURCES = ("burn-in", "monitor", "bench", "doctor", "fit", "profile")  # this order, at one status


# accept's documents say "pass" where other commands say "ok", and list a figure that was
# measured but not judged as "skip" (with "not judged" in its title).
_WORDS = {Status.OK: "pass", Status.NOT_JUDGED: "skip"}
_FROM_WORDS = {"pass": Status.OK}


@dataclass(frozen=True, kw_only=True)
class Verdict(Finding):
    """One acceptance verdict; `source` is burn-in, monitor, bench, doctor, fit or profile, and
    `gpu` the GPU it is about (None: the machine)."""

    gpu: int | None = None

    @classmethod
    def of(
        cls,
        id: str,
        status: Status | str,
        title: str,
        source: str,
        evidence: tuple[str, ...] = (),
        fix: str | None = None,
        cause: str | None = None,
        gpu: int | None = None,
    ) -> Verdict:
        """A verdict from accept's own words ("pass", "fail", ...) or a `Status`."""
        judged = status if isinstance(status, Status) else _FROM_WORDS.get(status) or Status(status)
        return cls(
            id=id,
            status=judged,
            title=title,
            source=source,
            evidence=tuple(evidence),
            fix=fix,
            cause=cause,
            gpu=gpu,
            subject=gpu_subject(gpu),
        )

    @property
    def word(self) -> str:
        """The status as accept's documents write it: fail, warn, pass or skip."""
        return _WORDS.get(self.status, self.status.value)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.word,
            "title": self.title,
            "source": self.source,
            "gpu": self.gpu,
            "evidence": list(self.evidence),
            "fix": self.fix,
            "cause": self.cause,
            "cause_title": causes.CAUSES[self.cause].title if self.cause in causes.CAUSES else None,
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Verdict:
        """The typed verdict from its `to_dict()` form (a saved `accept --json`)."""
        evidence = document.get("evidence") or ()
        if not isinstance(evidence, list | tuple) or not all(isinstance(e, str) for e in evidence):
            raise ValueError(f"verdict {document.get('id')!r}: evidence is not a list of texts")
        gpu = document.get("gpu")
        return cls.of(
            str(document["id"]),
            str(document["status"]),
            str(document.get("title") or ""),
            str(document.get("source") or ""),
            tuple(evidence),
            document.get("fix"),
            document.get("cause"),
            gpu if isinstance(gpu, int) else None,
        )


def fix_for(cause: str, specific: str | None = None) -> str:
    """The fix for this finding: its own words where it has them, else the cause's default."""
    return specific or causes.get(cause).default_fix


def rank(status: str) -> int:
    """Sort key of one of accept's words (fail first)."""
    return STATUSES.index(status) if status in STATUSES else len(STATUSES)

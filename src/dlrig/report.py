"""Findings shared by every command: one `Finding`, one `Status` vocabulary, one envelope.

doctor's checks, accept's verdicts, plan's rules, monitor's readings, bench's verdicts, health's
faults, profile's and diagnose's causes are `Finding`s (each a thin subclass that keeps its
command's JSON words), and they name causes from `dlrig.causes`, so a report from one command
reads next to another's.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dlrig.plain import from_plain

Progress = Callable[[str, float], None]
"""How a command reports long work: (what is running, fraction done 0..1). The CLI draws it."""


def no_progress(label: str, fraction: float) -> None:
    """The default `progress`: say nothing."""
    return None


class Status(enum.StrEnum):
    """How a finding was judged, the one vocabulary of every command that judges.

    Each command keeps the words its documents have always used on the wire (accept writes
    "pass", bench "low", monitor "critical"); in memory they are these values. `NOT_JUDGED` is
    a measurement with nothing to judge it against (a bench figure for a part with no
    published expectation): it is neither a pass nor a problem, and `accept` says so.
    """

    OK = "ok"
    INFO = "info"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    NOT_JUDGED = "not_judged"

    @property
    def rank(self) -> int:
        """Sort key: the worst first."""
        return _RANK[self]

    @property
    def is_problem(self) -> bool:
        """A finding someone has to act on (fail or warn)."""
        return self in (Status.FAIL, Status.WARN)


_RANK = {
    Status.FAIL: 0,
    Status.WARN: 1,
    Status.INFO: 2,
    Status.OK: 3,
    Status.NOT_JUDGED: 4,
    Status.SKIP: 5,
}


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One judged fact, the type every command's findings are (or subclass).

    `id` is stable across releases ("gpu.pcie_width", "bench.compute.bf16_matmul",
    "monitor.power_cap"); `source` the command or area that produced it (for a plan rule, the
    rule row's citation); `cause` an id of `dlrig.causes` when the finding has one; `subject`
    what it is about when that is narrower than the machine ("gpu 3", a node's name).
    """

    id: str
    status: Status
    title: str
    source: str = ""
    evidence: tuple[str, ...] = ()
    fix: str | None = None
    cause: str | None = None
    subject: str | None = None


def gpu_subject(index: int | None) -> str | None:
    """A finding's `subject` when it is about one GPU ("gpu 3"); None: the machine."""
    return None if index is None else f"gpu {index}"


@dataclass(frozen=True, kw_only=True)
class CheckResult(Finding):
    """A doctor check's result; `area` is its section of the report (driver, gpu, ...)."""

    area: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "area": self.area,
            "status": self.status.value,
            "title": self.title,
            "evidence": list(self.evidence),
            "fix": self.fix,
            "cause": self.cause,
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> CheckResult:
        """The typed result from its `to_dict()` form (a saved `doctor --json`); keys this dlrig
        does not know are dropped (a newer dlrig's document still reads)."""
        fields = {"source": "doctor", **{k: v for k, v in document.items() if k != "area"}}
        result: CheckResult = from_plain(
            CheckResult, {**fields, "area": document.get("area", "")}, "check", strict=False
        )
        return result


@dataclass(frozen=True)
class Summary:
    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, results: Sequence[Finding]) -> Summary:
        # "not_judged" is counted only when there is one: doctor's documents have always
        # carried the five others, each even at zero.
        counts = {status.value: 0 for status in Status if status is not Status.NOT_JUDGED}
        for result in results:
            counts[result.status.value] = counts.get(result.status.value, 0) + 1
        return cls(counts)


def envelope(schema: str, schema_version: int, body: Mapping[str, Any]) -> dict[str, Any]:
    """Every `--json` document: `schema` and `schema_version` first, then the command's own keys.

    `schema` names the document ("dlrig.doctor", "dlrig.bench", ...); a consumer checks it and
    the version before reading the rest. A key in `body` cannot replace either of them.
    """
    document: dict[str, Any] = {"schema": schema, "schema_version": schema_version}
    for key, value in body.items():
        if key not in document:
            document[key] = value
    return document


def rounded(value: float | None, digits: int) -> float | None:
    """A figure for a JSON document, rounded to what it can claim; None (not measured) stays."""
    return None if value is None else round(value, digits)

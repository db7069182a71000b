"""One measured figure, what it should be, and what to do when it falls short."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlrig.report import rounded

# Verdicts: ok (meets the expectation), low (below it: the fix says what to change), info (no
# expectation to judge against), skip (not applicable here), fail (the test could not run).
VERDICTS = ("ok", "low", "info", "skip", "fail")

Progress = Callable[[str, float], None]  # (what is running, fraction done of this part)


def no_progress(label: str, fraction: float) -> None:
    return None


@dataclass(frozen=True)
class BenchResult:
    part: str  # compute | memory | comms | storage | dataloader
    test: str  # bf16_matmul, h2d_pinned, all_reduce, seq_read, ...
    value: float | None
    unit: str
    expected: float | None = None  # what this part should reach, in `unit`
    verdict: str = "info"
    fix: str | None = None
    note: str | None = None  # how it was measured, what the expectation is
    cause: str | None = None  # from dlrig.causes when low
    detail: dict[str, Any] = field(default_factory=dict)  # per-size figures for plots

    @property
    def percent(self) -> float | None:
        if self.value is None or not self.expected:
            return None
        return 100.0 * self.value / self.expected

    def to_dict(self) -> dict[str, Any]:
        return {
            "part": self.part,
            "test": self.test,
            "value": self.value,
            "unit": self.unit,
            "expected": self.expected,
            "percent": rounded(self.percent, 1),
            "verdict": self.verdict,
            "fix": self.fix,
            "note": self.note,
            "cause": self.cause,
            "detail": self.detail,
        }


def judged(
    part: str,
    test: str,
    value: float,
    unit: str,
    expected: float | None,
    ok_at_percent: float,
    fix: str,
    note: str,
    cause: str | None = None,
    detail: dict[str, Any] | None = None,
) -> BenchResult:
    """A result with its verdict: ok at or above `ok_at_percent` of `expected`, else low."""
    if not expected:
        return BenchResult(part, test, value, unit, None, "info", None, note, None, detail or {})
    ok = 100.0 * value / expected >= ok_at_percent
    return BenchResult(
        part,
        test,
        value,
        unit,
        expected,
        "ok" if ok else "low",
        None if ok else fix,
        note,
        None if ok else cause,
        detail or {},
    )

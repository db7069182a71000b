"""One measured figure, what it should be, and what to do when it falls short."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dlrig.report import Finding, Progress, Status, gpu_subject, no_progress, rounded

# Verdicts: ok (meets the expectation), low (below it: the fix says what to change), info (no
# expectation to judge against), skip (not applicable here), fail (the test could not run).
VERDICTS = ("ok", "low", "info", "skip", "fail")

__all__ = ["VERDICTS", "BenchResult", "Progress", "judged", "no_progress"]


# bench's words for its verdicts, and the one status each is: "low" is short of the
# expectation (the fix says what to change), "fail" a test that could not run, "info" a figure
# with nothing to judge it against.
_VERDICT_STATUS = {
    "ok": Status.OK,
    "low": Status.WARN,
    "info": Status.NOT_JUDGED,
    "skip": Status.SKIP,
    "fail": Status.FAIL,
}
_STATUS_VERDICT = {status: word for word, status in _VERDICT_STATUS.items()}


@dataclass(frozen=True, kw_only=True)
class BenchResult(Finding):
    """One measured figure (`value` in `unit`) and its verdict; `id` is "bench.PART.TEST"."""

    part: str  # compute | memory | comms | storage | dataloader | pack
    test: str  # bf16_matmul, h2d_pinned, all_reduce, seq_read, ...
    value: float | None
    unit: str
    expected: float | None = None  # what this part should reach, in `unit`
    note: str | None = None  # how it was measured, what the expectation is
    detail: dict[str, Any] = field(default_factory=dict)  # per-size figures for plots
    gpu_index: int | None = None  # the GPU it ran on, where `accept` ran the part per GPU

    @classmethod
    def of(
        cls,
        part: str,
        test: str,
        value: float | None,
        unit: str,
        expected: float | None = None,
        verdict: str = "info",
        fix: str | None = None,
        note: str | None = None,
        cause: str | None = None,
        detail: dict[str, Any] | None = None,
        gpu_index: int | None = None,
    ) -> BenchResult:
        """A result in bench's words: verdict ok, low, info, skip or fail."""
        if verdict not in _VERDICT_STATUS:
            raise ValueError(f"bench verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
        return cls(
            id=f"bench.{part}.{test}",
            status=_VERDICT_STATUS[verdict],
            title=f"{part} {test}",
            source="bench",
            fix=fix,
            cause=cause,
            subject=gpu_subject(gpu_index),
            part=part,
            test=test,
            value=value,
            unit=unit,
            expected=expected,
            note=note,
            detail=detail or {},
            gpu_index=gpu_index,
        )

    @property
    def verdict(self) -> str:
        """ok, low, info, skip or fail: the word bench's documents use."""
        return _STATUS_VERDICT[self.status]

    @property
    def percent(self) -> float | None:
        if self.value is None or not self.expected:
            return None
        return 100.0 * self.value / self.expected

    def on_gpu(self, index: int) -> BenchResult:
        """This result, said of GPU `index` (accept runs per-GPU parts once on each)."""
        return dataclasses.replace(self, gpu_index=index, subject=gpu_subject(index))

    def to_dict(self) -> dict[str, Any]:
        document = {
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
        if self.gpu_index is not None:
            document["gpu_index"] = self.gpu_index
        return document

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> BenchResult:
        """The typed result from its `to_dict()` form (a saved `bench --json` or accept's)."""
        where = f"bench result {document.get('part')}.{document.get('test')}"
        try:
            value, expected = document.get("value"), document.get("expected")
            gpu_index, detail = document.get("gpu_index"), document.get("detail")
            return cls.of(
                str(document["part"]),
                str(document["test"]),
                _number(value, f"{where}.value"),
                str(document.get("unit") or ""),
                _number(expected, f"{where}.expected"),
                str(document.get("verdict", "info")),
                document.get("fix"),
                document.get("note"),
                document.get("cause"),
                detail if isinstance(detail, dict) else {},
                gpu_index if isinstance(gpu_index, int) else None,
            )
        except KeyError as exc:
            raise ValueError(f"{where}: no {exc.args[0]!r}") from None


def _number(value: Any, where: str) -> float | None:
    # Kept as written (an int stays an int) so a saved document reads back and writes the same.
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise ValueError(f"{where}: expected a number, got {value!r}")
    return value


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
        return BenchResult.of(part, test, value, unit, None, "info", None, note, None, detail or {})
    ok = 100.0 * value / expected >= ok_at_percent
    return BenchResult.of(
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

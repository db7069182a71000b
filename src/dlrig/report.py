"""Findings shared by every command: one check result, one status vocabulary.

`doctor` produces CheckResults; `diagnose` and `bench` speak the same cause vocabulary
(`dlrig.causes`), so a report from one can be read next to another.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class Status(enum.StrEnum):
    OK = "ok"
    INFO = "info"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"

    @property
    def rank(self) -> int:
        """Sort key: the worst first."""
        return {"fail": 0, "warn": 1, "info": 2, "ok": 3, "skip": 4}[self.value]


@dataclass(frozen=True)
class CheckResult:
    id: str
    area: str
    status: Status
    title: str
    evidence: tuple[str, ...] = ()
    fix: str | None = None
    cause: str | None = None

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


@dataclass(frozen=True)
class Summary:
    counts: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, results: tuple[CheckResult, ...] | list[CheckResult]) -> Summary:
        counts = {status.value: 0 for status in Status}
        for result in results:
            counts[result.status.value] += 1
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

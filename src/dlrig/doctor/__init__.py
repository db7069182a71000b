"""`dlrig doctor`: is this machine set up right? Checks are pure functions of a snapshot."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlrig.doctor.checks import all_checks, get
from dlrig.doctor.registry import Check, DoctorOptions
from dlrig.machine.model import Machine
from dlrig.report import CheckResult, Status, Summary, envelope

SCHEMA_VERSION = 1

__all__ = ["SCHEMA_VERSION", "Check", "DoctorOptions", "DoctorReport", "all_checks", "get", "run"]


@dataclass(frozen=True)
class DoctorReport:
    machine: Machine
    checks: tuple[CheckResult, ...]
    schema_version: int = SCHEMA_VERSION

    @property
    def failed(self) -> bool:
        return any(result.status is Status.FAIL for result in self.checks)

    @property
    def summary(self) -> Summary:
        return Summary.of(self.checks)

    def to_dict(self) -> dict[str, Any]:
        return envelope(
            "dlrig.doctor",
            self.schema_version,
            {
                "machine": self.machine.to_dict(),
                "summary": self.summary.counts,
                "checks": [result.to_dict() for result in self.checks],
            },
        )


def run(machine: Machine, options: DoctorOptions | None = None) -> DoctorReport:
    """Run every check on a snapshot. A check that raises is reported, never propagated."""
    options = options or DoctorOptions()
    results = []
    for entry in all_checks():
        try:
            results.append(entry.run(machine, options))
        except Exception as exc:  # noqa: BLE001 - one buggy check must not hide the others
            results.append(
                CheckResult(
                    entry.id,
                    entry.area,
                    Status.SKIP,
                    f"check crashed: {type(exc).__name__}: {exc}",
                    (
                        "this is a dlrig bug; please report it with `dlrig doctor --save snapshot.json`",
                    ),
                )
            )
    return DoctorReport(machine=machine, checks=tuple(results))

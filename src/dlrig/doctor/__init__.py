"""`dlrig doctor`: is this machine set up right? Checks are pure functions of a snapshot."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlrig.doctor.checks import all_checks, get
from dlrig.doctor.registry import Check, DoctorOptions
from dlrig.machine import probe
from dlrig.machine.model import Machine
from dlrig.report import CheckResult, Progress, Status, Summary, envelope, no_progress

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

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> DoctorReport:
        """The typed report from a saved `dlrig doctor --json` (ValueError names what does not
        fit)."""
        if document.get("schema") != "dlrig.doctor":
            raise ValueError(f"not a dlrig doctor document (schema {document.get('schema')!r})")
        checks = document.get("checks")
        if not isinstance(checks, list):
            raise ValueError("doctor document: `checks` is not a list")
        return cls(
            machine=Machine.from_dict(document.get("machine") or {}, strict=False),
            checks=tuple(CheckResult.from_dict(check) for check in checks),
            schema_version=int(document.get("schema_version", SCHEMA_VERSION)),
        )


def run(
    options: DoctorOptions | None = None,
    *,
    machine: Machine | None = None,
    progress: Progress = no_progress,
) -> DoctorReport:
    """Run every check on `machine` (a snapshot: `dlrig.machine.readers.load(path)` or
    `probe.collect()`; None probes this machine now). A check that raises is reported, never
    propagated."""
    if options is not None and not isinstance(options, DoctorOptions):
        # doctor.run(machine) of earlier releases: a snapshot here must not be silently
        # replaced by a probe of this machine
        raise TypeError(
            f"doctor.run(options, *, machine=...): options is a {type(options).__name__}; "
            "call doctor.run(machine=snapshot)"
        )
    options = options or DoctorOptions()
    if machine is None:
        progress("doctor: reading this machine's facts", 0.0)
        machine = probe.collect()
    results = []
    checks = all_checks()
    for position, entry in enumerate(checks):
        progress(f"doctor: {entry.id}", position / len(checks))
        try:
            results.append(entry.run(machine, options))
        except Exception as exc:  # noqa: BLE001 - one buggy check must not hide the others
            results.append(
                CheckResult(
                    id=entry.id,
                    source="doctor",
                    area=entry.area,
                    status=Status.SKIP,
                    title=f"check crashed: {type(exc).__name__}: {exc}",
                    evidence=(
                        "this is a dlrig bug; please report it with `dlrig doctor --save snapshot.json`",
                    ),
                )
            )
    return DoctorReport(machine=machine, checks=tuple(results))

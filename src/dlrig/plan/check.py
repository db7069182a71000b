"""`dlrig plan check build.yaml`: the build, its power figures, and every rule's verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrig.plan import buildspec, power
from dlrig.plan.assume import Input, Inputs
from dlrig.plan.buildspec import Build
from dlrig.plan.rules import check
from dlrig.plan.verdict import RuleResult
from dlrig.report import envelope

SCHEMA = "dlrig.plan.check"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class CheckReport:
    path: str
    build: Build
    results: tuple[RuleResult, ...]
    psu_required_watts: float
    psu_basis: str
    peak_wall_watts: float
    inputs: tuple[Input, ...] = field(default_factory=tuple)

    @property
    def failed(self) -> list[RuleResult]:
        return [r for r in self.results if r.status == "fail"]

    @property
    def warnings(self) -> list[RuleResult]:
        return [r for r in self.results if r.status == "warn"]

    def to_dict(self) -> dict[str, Any]:
        build = self.build
        return envelope(
            SCHEMA,
            SCHEMA_VERSION,
            {
                "path": self.path,
                "build": {
                    "name": build.name,
                    "gpu": build.gpus.spec.id,
                    "gpus": build.gpus.count,
                    "gpu_power_limit_watts": build.gpus.power_limit_watts,
                    "cpu": build.cpu.name if build.cpu else None,
                    "ram_gb": build.ram_gb,
                    "psu_watts": build.psu.capacity_watts if build.psu else None,
                    "circuit": build.circuit.label() if build.circuit else None,
                    "form_factor": build.form_factor,
                },
                "psu_required_watts": round(self.psu_required_watts, 1),
                "psu_basis": self.psu_basis,
                "peak_wall_watts": round(self.peak_wall_watts, 1),
                "failed": [r.id for r in self.failed],
                "warnings": [r.id for r in self.warnings],
                "results": [r.to_dict() for r in self.results],
                "inputs": [i.to_dict() for i in self.inputs],
            },
        )


def check_build(build: Build, path: str = "", inputs: Inputs | None = None) -> CheckReport:
    """Every build rule (PCIe lanes, slots, RAM, PSU, cooling, ...) checked on `build`."""
    inputs = inputs or Inputs()
    results = tuple(check(build, inputs))
    need = power.psu_need(build)
    return CheckReport(
        path=path,
        build=build,
        results=results,
        psu_required_watts=need.required_watts,
        psu_basis=need.basis,
        peak_wall_watts=power.peak_wall_watts(build, inputs),
        inputs=tuple(inputs.used()),
    )


def check_file(path: str | Path, inputs: Inputs | None = None) -> CheckReport:
    """`check_build` of a build YAML file (`dlrig plan check build.yaml`)."""
    return check_build(buildspec.load(path), str(path), inputs)

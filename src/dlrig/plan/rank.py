"""`dlrig plan WORKLOAD...`: every build and cloud offer, evaluated, costed and ranked.

An option is feasible when every workload fits, each run meets its deadline, the money stays
within the budget, the build passes its rules (circuit included) and the demand fits in a
year. Feasible options come first, cheapest TCO over the years of service first; the rest
follow with the reasons they fail.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from dlrig.errors import DlrigError
from dlrig.knowledge.gpus import GpuSpec, catalogue
from dlrig.plan import costs, rules
from dlrig.plan.assume import Input, Inputs
from dlrig.plan.builds import Candidate, Condition, FormFactor, Wanted, enumerate_builds
from dlrig.plan.buildspec import Circuit
from dlrig.plan.cloud import CloudOffer, offers
from dlrig.plan.fitting import Evaluation, WorkloadFit, evaluate_many
from dlrig.plan.workloads import Workload
from dlrig.report import envelope, rounded

SCHEMA = "dlrig.plan"
SCHEMA_VERSION = 1
CATALOGUE_COUNTS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Constraints:
    budget_usd: float | None = None
    deadline_hours: float | None = None
    circuit: Circuit | None = None
    form_factor: FormFactor = "any"
    condition: Condition = "any"
    cloud: bool = True
    gpus: tuple[str, ...] = ()
    max_gpus: int = 8
    liquid: bool = False
    utilisation: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget_usd": self.budget_usd,
            "deadline_hours": self.deadline_hours,
            "circuit": self.circuit.label() if self.circuit else None,
            "form_factor": self.form_factor,
            "condition": self.condition,
            "cloud": self.cloud,
            "gpus": list(self.gpus),
            "max_gpus": self.max_gpus,
            "cooling": "liquid" if self.liquid else "air",
            "utilisation": self.utilisation,
        }


@dataclass
class Option:
    kind: Literal["build", "cloud"]
    label: str
    gpu: str
    count: int
    evaluations: dict[str, Evaluation]
    economics: costs.Economics
    reasons: list[str] = field(default_factory=list)
    rules_failed: list[str] = field(default_factory=list)
    rules_warned: list[str] = field(default_factory=list)
    candidate: Candidate | None = None
    offer: CloudOffer | None = None
    break_even_months: float | None = None
    pareto: bool = False

    @property
    def feasible(self) -> bool:
        return not self.reasons

    @property
    def cycle_hours(self) -> float | None:
        """Hours to run every workload once: the time axis of the Pareto plot."""
        times = [e.time_per_run_s for e in self.evaluations.values()]
        return None if any(t is None for t in times) else sum(t for t in times if t) / 3600

    def to_dict(self) -> dict[str, Any]:
        e = self.economics
        body: dict[str, Any] = {
            "kind": self.kind,
            "label": self.label,
            "gpu": self.gpu,
            "count": self.count,
            "feasible": self.feasible,
            "reasons": self.reasons,
            "fits": {w: ev.fits for w, ev in self.evaluations.items()},
            "time_per_workload_s": {w: ev.time_per_run_s for w, ev in self.evaluations.items()},
            "capex_usd": round(e.capex_usd, 2),
            "power_wall_watts": rounded(e.power_wall_watts, 1),
            "energy_kwh_per_year": rounded(e.energy_kwh_per_year, 1),
            "energy_cost_usd_per_year": rounded(e.energy_cost_usd_per_year, 2),
            "cost_per_year_usd": rounded(e.cost_per_year_usd, 2),
            "tco_usd": rounded(e.tco_usd, 2),
            "cost_per_run_usd": {w: rounded(c, 2) for w, c in e.cost_per_run_usd.items()},
            "busy_hours_per_year": rounded(e.busy_hours_per_year, 1),
            "break_even_months": rounded(self.break_even_months, 1),
            "pareto": self.pareto,
            "evaluations": [ev.to_dict() for ev in self.evaluations.values()],
        }
        if self.candidate is not None:
            build = self.candidate.build
            body["build"] = {
                "form_factor": build.form_factor,
                "condition": self.candidate.condition,
                "cpu": {
                    "name": build.cpu.name,
                    "sockets": build.cpu.sockets,
                    "cores": build.cpu.cores,
                    "pcie_lanes": build.cpu.pcie_lanes,
                }
                if build.cpu
                else None,
                "ram_gb": build.ram_gb,
                "psu": {
                    "watts": build.psu.watts,
                    "count": build.psu.count,
                    "redundant": build.psu.redundant,
                }
                if build.psu
                else None,
                "storage": [
                    {"kind": s.kind, "capacity_gb": s.capacity_gb, "read_mb_s": s.read_mb_s}
                    for s in build.storage
                ],
                "cooling": "liquid" if build.liquid_cooling else "air",
                "nvlink": build.nvlink,
                "parts": [p.to_dict() for p in self.candidate.parts],
                "notes": list(self.candidate.notes),
                "rules_failed": self.rules_failed,
                "rules_warned": self.rules_warned,
            }
        if self.offer is not None:
            o = self.offer
            body["cloud"] = {
                "provider": o.provider,
                "instance": o.instance,
                "pricing": o.pricing,
                "usd_per_hour": o.usd_per_hour,
                "region": o.region,
                "derived": o.derived,
                "source": o.source,
                "as_of": o.as_of,
            }
        return body


@dataclass
class PlanResult:
    workloads: list[Workload]
    constraints: Constraints
    options: list[Option]
    skipped_builds: list[str]
    catalogue: list[dict[str, Any]]
    inputs: list[Input]
    traces: int

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options and self.options[0].feasible else None

    def to_dict(self) -> dict[str, Any]:
        return envelope(
            SCHEMA,
            SCHEMA_VERSION,
            {
                "workloads": [w.to_dict() for w in self.workloads],
                "constraints": self.constraints.to_dict(),
                "options": [o.to_dict() for o in self.options],
                "feasible": sum(o.feasible for o in self.options),
                "skipped_builds": self.skipped_builds,
                "catalogue": self.catalogue,
                "inputs": [i.to_dict() for i in self.inputs],
                "traces": self.traces,
            },
        )


def _evaluate(fit: WorkloadFit, spec: GpuSpec, count: int) -> Evaluation:
    return fit.evaluate(spec, count)


def _reasons(option: Option, workloads: Sequence[Workload], constraints: Constraints) -> list[str]:
    reasons = []
    for workload in workloads:
        ev = option.evaluations[workload.name]
        if not ev.fits:
            detail = ev.note or (
                f"peak {ev.memory_peak_bytes / 2**30:.1f} GiB > {ev.gpu_memory_bytes / 2**30:.1f} GiB"
                if ev.memory_peak_bytes and ev.gpu_memory_bytes
                else "does not fit"
            )
            reasons.append(f"{workload.name}: {detail}")
            continue
        deadline = workload.deadline_hours or constraints.deadline_hours
        if deadline and ev.time_per_run_s is not None and ev.time_per_run_s / 3600 > deadline:
            reasons.append(
                f"{workload.name}: {ev.time_per_run_s / 3600:.1f} h per run > deadline {deadline:g} h"
            )
    money = option.economics.capex_usd if option.kind == "build" else option.economics.tco_usd
    if constraints.budget_usd is not None and money is not None and money > constraints.budget_usd:
        what = "capex" if option.kind == "build" else "spend over the years of service"
        reasons.append(f"{what} USD {money:,.0f} > budget USD {constraints.budget_usd:,.0f}")
    if option.economics.over_capacity:
        reasons.append("the workloads need more hours a year than the option has")
    reasons += [f"rule {r} fails" for r in option.rules_failed]
    return reasons


def _mark_pareto(options: list[Option]) -> None:
    points = [
        o
        for o in options
        if o.feasible and o.cycle_hours is not None and o.economics.tco_usd is not None
    ]
    for o in points:
        o.pareto = not any(
            p is not o
            and p.cycle_hours is not None
            and o.cycle_hours is not None
            and p.economics.tco_usd is not None
            and o.economics.tco_usd is not None
            and p.cycle_hours <= o.cycle_hours
            and p.economics.tco_usd <= o.economics.tco_usd
            and (p.cycle_hours < o.cycle_hours or p.economics.tco_usd < o.economics.tco_usd)
            for p in points
        )


def plan(workloads: Sequence[Workload], constraints: Constraints, inputs: Inputs) -> PlanResult:
    """The servers (to buy or rent) that run `workloads` within `constraints`, best first, with
    their time, cost of ownership in USD and every build rule checked."""
    if not workloads:
        raise DlrigError(
            "no workload to plan for", fix="dlrig plan resnet50:epochs=90,dataset=1281167"
        )
    wanted = Wanted(
        constraints.form_factor,
        constraints.condition,
        constraints.gpus,
        constraints.max_gpus,
        constraints.liquid,
        constraints.circuit,
    )
    candidates, skipped = enumerate_builds(wanted, inputs)
    cloud_offers = []
    if constraints.cloud:
        for offer in offers(inputs, constraints.gpus):
            spec = catalogue().get(offer.gpu)
            if spec is not None and offer.gpus <= constraints.max_gpus:
                cloud_offers.append((offer, spec))
    pairs = [(c.build.gpus.spec, c.build.gpus.count) for c in candidates]
    pairs += [(spec, offer.gpus) for offer, spec in cloud_offers]
    pairs += [(spec, count) for spec in catalogue().devices for count in CATALOGUE_COUNTS]
    fits = evaluate_many(workloads, pairs)
    options: list[Option] = []
    for candidate in candidates:
        build = candidate.build
        evals = {
            w.name: _evaluate(fits[w.name], build.gpus.spec, build.gpus.count) for w in workloads
        }
        times = {n: e.time_per_run_s for n, e in evals.items()}
        economics = costs.build_economics(
            candidate, workloads, times, inputs, constraints.utilisation
        )
        checked = rules.check(build, inputs)
        option = Option(
            "build",
            candidate.label,
            build.gpus.spec.id,
            build.gpus.count,
            evals,
            economics,
            candidate=candidate,
        )
        option.rules_failed = [r.id for r in checked if r.status == "fail"]
        option.rules_warned = [r.id for r in checked if r.status == "warn"]
        options.append(option)
    for offer, spec in cloud_offers:
        evals = {w.name: _evaluate(fits[w.name], spec, offer.gpus) for w in workloads}
        times = {n: e.time_per_run_s for n, e in evals.items()}
        economics = costs.cloud_economics(offer, workloads, times, inputs)
        options.append(
            Option("cloud", offer.label, spec.id, offer.gpus, evals, economics, offer=offer)
        )
    for option in options:
        option.reasons = _reasons(option, workloads, constraints)
    clouds = [
        o
        for o in options
        if o.kind == "cloud" and o.feasible and o.economics.cost_per_year_usd is not None
    ]
    cheapest_cloud = min(
        clouds, key=lambda o: o.economics.cost_per_year_usd or math.inf, default=None
    )
    if cheapest_cloud is not None:
        for option in options:
            if option.kind == "build":
                option.break_even_months = costs.break_even_months(
                    option.economics, cheapest_cloud.economics
                )
    options.sort(
        key=lambda o: (
            not o.feasible,
            len(o.reasons),
            o.economics.tco_usd if o.economics.tco_usd is not None else math.inf,
            o.cycle_hours or math.inf,
        )
    )
    _mark_pareto(options)
    matrix = []
    for spec in catalogue().devices:
        for count in CATALOGUE_COUNTS:
            row: dict[str, Any] = {"gpu": spec.id, "count": count}
            for w in workloads:
                ev = _evaluate(fits[w.name], spec, count)
                row[w.name] = {
                    "fits": ev.fits,
                    "time_per_run_s": ev.time_per_run_s,
                    "memory_peak_bytes": ev.memory_peak_bytes,
                }
            matrix.append(row)
    return PlanResult(
        workloads=list(workloads),
        constraints=constraints,
        options=options,
        skipped_builds=skipped,
        catalogue=matrix,
        inputs=inputs.used(),
        traces=sum(f.traces_made for f in fits.values()),
    )

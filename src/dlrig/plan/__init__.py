"""`dlrig plan`: from workloads and a budget to the server to buy (or rent), every rule checked.

    from dlrig import plan
    workloads, constraints, inputs = plan.request(
        ["resnet50:epochs=90,dataset=1281167,every=month"], {"circuit": "230V16A", "budget": 60000}
    )
    result = plan.run(plan.PlanOptions(workloads, constraints, inputs))  # options, best first
    result.best.label, result.best.economics.tco_usd, result.to_dict()["options"][0]

    report = plan.check_file("build.yaml")                  # report.failed: the broken rules
    costs = plan.cost("history.db", plan.Inputs())          # a server's energy and savings
    steps = plan.upgrade(machine, plan.Inputs(), bench_results, usage)

Importing this package does not import torch: only tracing a workload does (in worker
processes, one per CPU).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dlrig.plan.assume import Inputs, parse_assume
from dlrig.plan.check import CheckReport, check_build, check_file
from dlrig.plan.rank import Constraints, Option, PlanResult, plan
from dlrig.plan.request import request
from dlrig.plan.savings import CostReport, cost
from dlrig.plan.upgrade import UpgradeReport, upgrade
from dlrig.plan.workloads import Workload
from dlrig.plan.workloads import parse as parse_workload
from dlrig.report import Progress, no_progress

__all__ = [
    "CheckReport",
    "Constraints",
    "CostReport",
    "Inputs",
    "Option",
    "PlanOptions",
    "PlanResult",
    "UpgradeReport",
    "Workload",
    "check_build",
    "check_file",
    "cost",
    "parse_assume",
    "parse_workload",
    "plan",
    "request",
    "run",
    "upgrade",
]


@dataclass(frozen=True)
class PlanOptions:
    """What to plan for: the workloads, the buyer's constraints and the assumptions (prices,
    utilisation, ...); `plan.request(...)` builds all three from `dlrig plan`'s arguments."""

    workloads: Sequence[Workload]
    constraints: Constraints
    inputs: Inputs


def run(options: PlanOptions, *, progress: Progress = no_progress) -> PlanResult:
    """The servers to buy or rent for `options`, best first, every build rule checked
    (`dlrig plan --json`). No `machine`: a plan is for a server not bought yet (`plan.upgrade`
    takes the snapshot of one that exists)."""
    progress("plan: fitting the workloads to each option", 0.0)
    result = plan(options.workloads, options.constraints, options.inputs)
    progress("plan: done", 1.0)
    return result

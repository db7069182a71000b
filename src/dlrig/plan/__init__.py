"""`dlrig plan`: from workloads and a budget to the server to buy (or rent), every rule checked.

    from dlrig import plan
    workloads, constraints, inputs = plan.request(
        ["resnet50:epochs=90,dataset=1281167,every=month"], {"circuit": "230V16A", "budget": 60000}
    )
    result = plan.plan(workloads, constraints, inputs)      # options, best first
    result.best.label, result.best.economics.tco_usd, result.to_dict()["options"][0]

    report = plan.check_file("build.yaml")                  # report.failed: the broken rules
    costs = plan.cost("history.db", plan.Inputs())          # a server's energy and savings
    steps = plan.upgrade(machine, plan.Inputs(), bench_results, usage)

Importing this package does not import torch: only tracing a workload does (in worker
processes, one per CPU).
"""

from __future__ import annotations

from dlrig.plan.assume import Inputs, parse_assume
from dlrig.plan.check import CheckReport, check_build, check_file
from dlrig.plan.rank import Constraints, Option, PlanResult, plan
from dlrig.plan.request import request
from dlrig.plan.savings import CostReport, cost
from dlrig.plan.upgrade import UpgradeReport, upgrade
from dlrig.plan.workloads import Workload
from dlrig.plan.workloads import parse as parse_workload

__all__ = [
    "CheckReport",
    "Constraints",
    "CostReport",
    "Inputs",
    "Option",
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
    "upgrade",
]

"""`dlrig doctor --fleet`: the same doctor on every node, and what differs between them.

Either fans out over a Slurm cluster (`srun`, one task per responding node, each running
`dlrig doctor --json`) or reads saved reports/snapshots, one per node. Then it compares the
facts that must agree across a training cluster (driver, CUDA, torch, GPU count and model,
PCIe links, ECC, NCCL settings) and the doctor checks, and names the odd node out: the node
whose value differs from the majority, and the checks that fail only there. Drained or down
nodes are odd too: a job cannot use them.
"""

from __future__ import annotations

from typing import Any

from dlrig.doctor.fleet_compare import (
    SCHEMA,
    SCHEMA_VERSION,
    CheckDifference,
    Difference,
    FleetReport,
    NodeResult,
    compare,
    facts_of,
    failed_checks,
    key_of,
)
from dlrig.doctor.fleet_sources import from_paths, node_states, via_srun

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "CheckDifference",
    "Difference",
    "FleetReport",
    "NodeResult",
    "collect",
    "compare",
    "facts_of",
    "failed_checks",
    "from_paths",
    "key_of",
    "node_states",
    "render_text",
    "via_srun",
]


def render_text(report: FleetReport, out: Any) -> None:
    out.print(f"[bold]dlrig doctor --fleet[/bold]: {len(report.nodes)} node(s)")
    for node in report.nodes:
        failed, warned = failed_checks(node.report), failed_checks(node.report, "warn")
        state = "reported" if node.state == "ok" else node.state
        line = f"  {node.node}: {state}" + (f" ({node.detail})" if node.detail else "")
        if failed:
            line += f" — {len(failed)} failing: " + ", ".join(failed)
        if warned:
            line += f" — {len(warned)} warning(s): " + ", ".join(warned)
        out.print(line)
    if report.differences:
        out.print()
        out.print("[bold]differences[/bold]")
        for difference in report.differences:
            values = "; ".join(f"{n}={v}" for n, v in difference.values.items())
            odd = (
                f" — odd: {', '.join(difference.odd_nodes)}"
                if difference.odd_nodes
                else " — no majority"
            )
            out.print(f"  {difference.attribute}: {values}{odd}")
    if report.checks:
        out.print()
        out.print("[bold]checks that differ[/bold]")
        for check in report.checks:
            states = "; ".join(f"{n}={s}" for n, s in check.statuses.items())
            fails = [n for n in check.failing_nodes if check.statuses.get(n) == "fail"]
            warns = [n for n in check.failing_nodes if check.statuses.get(n) != "fail"]
            where = "; ".join(
                part
                for part in (
                    f"fails on {', '.join(fails)}" if fails else "",
                    f"warns on {', '.join(warns)}" if warns else "",
                )
                if part
            )
            out.print(f"  {check.check} ({check.title}): {states} — {where}")
            for name, text in check.evidence.items():
                out.print(f"    {name}: {text}", style="dim")
    out.print()
    if report.odd_nodes:
        out.print(f"[bold red]odd node(s) out: {', '.join(report.odd_nodes)}[/bold red]")
    if report.no_majority:
        out.print(
            f"[bold red]no majority for: {', '.join(report.no_majority)}[/bold red] "
            "(the nodes disagree and none is the odd one: make them alike)"
        )
    if not report.problem:
        out.print("[green]all nodes agree[/green]")


def collect(spec: str, timeout_s: float) -> FleetReport:
    """The fleet's report: `srun` fans out over the Slurm cluster, else saved files."""
    return via_srun(timeout_s=max(60.0, timeout_s * 6)) if spec == "srun" else from_paths(spec)

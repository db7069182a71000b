"""The readable report of `plan check`."""

from __future__ import annotations

from typing import Any

from dlrig.plan.assume import Input
from dlrig.plan.check import CheckReport

STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def render_inputs(inputs: tuple[Input, ...] | list[Input], out: Any) -> None:
    """The defaults a computation used; unsourced ones are labelled ASSUMPTION."""
    given = [f"{i.name}={i.value} ({i.origin})" for i in inputs if i.origin != "default"]
    sourced = [
        f"{i.name}={i.value} {i.unit}" for i in inputs if i.origin == "default" and not i.assumption
    ]
    assumed = [i for i in inputs if i.origin == "default" and i.assumption]
    if given:
        out.print("[dim]given: " + ", ".join(given) + "[/dim]")
    if sourced:
        out.print(
            "[dim]sourced defaults (see --json inputs for the sources): "
            + ", ".join(sourced)
            + "[/dim]"
        )
    if assumed:
        out.print(
            "[bold yellow]ASSUMPTIONS[/bold yellow] (no primary source; replace with --assume NAME=VALUE):"
        )
        for item in assumed:
            out.print(
                f"  [yellow]{item.name}={item.value}[/yellow] {item.unit}: {item.description}"
            )


def render_check(report: CheckReport, out: Any) -> None:
    from rich.table import Table

    build = report.build
    gpus = build.gpus
    limit = f" at {gpus.power_limit_watts:.0f} W" if gpus.power_limit_watts else ""
    out.print(f"[bold]dlrig plan check[/bold] {report.path or build.name}: {build.name}")
    out.print(
        f"{gpus.count} x {gpus.spec.name}{limit}; PSU needs {report.psu_required_watts:.0f} W "
        f"({report.psu_basis}); about {report.peak_wall_watts:.0f} W at the wall at full load"
    )
    table = Table(expand=False)
    for column in ("rule", "verdict", "finding"):
        table.add_column(column)
    for result in report.results:
        style = STYLE.get(result.status, "")
        table.add_row(result.id, f"[{style}]{result.status}[/]", result.title)
    out.print(table)
    for result in report.results:
        if result.status in ("fail", "warn"):
            for line in result.evidence:
                if line != result.title:
                    out.print(f"  [dim]{result.id}: {line}[/dim]")
            if result.fix:
                out.print(f"[bold]{result.id}[/bold] fix: {result.fix}")
            out.print(f"  [dim]source: {result.source[:200]}[/dim]")
    render_inputs(report.inputs, out)
    verdict = (
        f"[bold red]{len(report.failed)} rule(s) failed[/bold red]: "
        + ", ".join(r.id for r in report.failed)
        if report.failed
        else "[green]no rule failed[/green]"
    )
    out.print(verdict + (f"; {len(report.warnings)} warning(s)" if report.warnings else ""))

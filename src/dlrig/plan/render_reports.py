"""The readable reports of `plan cost` and `plan upgrade`."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dlrig.plan.render import money
from dlrig.plan.render_check import render_inputs
from dlrig.plan.savings import CostReport
from dlrig.plan.upgrade import UpgradeReport


def _when(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def render_cost(report: CostReport, out: Any) -> None:
    from rich.table import Table

    u = report.usage
    out.print(
        f"[bold]dlrig plan cost[/bold] {u.path}: {u.month}, {_when(u.from_unix)} to {_when(u.to_unix)}"
    )
    hours = report.recorded_hours
    extrapolated = hours < report.month_hours * 0.95
    recorded = f"{hours:.2f} h" if hours >= 0.1 else f"{hours * 3600:.1f} s"
    out.print(
        f"{len(u.gpus)} GPU(s), {u.utilization_mean_percent or 0:.0f}% mean utilisation, busy {u.busy_fraction:.0%} of the time"
        f" over {recorded} recorded"
        + (
            " [yellow](month and year EXTRAPOLATED from the recorded time)[/yellow]"
            if extrapolated
            else ""
        )
    )
    table = Table(expand=False)
    for column in ("GPU", "name", "util", "busy", "busy W", "idle W", "kWh"):
        table.add_column(column, no_wrap=True)
    for g in u.gpus:
        table.add_row(
            str(g.index),
            g.name or "-",
            f"{g.utilization_mean_percent:.0f}%" if g.utilization_mean_percent is not None else "-",
            f"{g.busy_seconds / g.seconds:.0%}" if g.seconds else "-",
            f"{g.busy_power_watts:.0f}" if g.busy_power_watts is not None else "-",
            f"{g.idle_power_watts:.0f}" if g.idle_power_watts is not None else "-",
            f"{g.energy_kwh:.4g}",
        )
    out.print(table)
    out.print(
        f"energy {report.energy_kwh:.4g} kWh at the wall (GPUs measured + host ASSUMED, x PUE {report.pue:g}) = {money(report.cost_usd)} "
        f"at ${report.price_per_kwh:g}/kWh; this month ~{money(report.cost_month_usd)}, a year ~{money(report.cost_year_usd)}"
    )
    out.print("[bold]savings on this history[/bold] (per year):")
    for saving in report.savings:
        out.print(
            f"  [bold]{saving.name}[/bold]: {money(saving.usd_per_year)}/year — {saving.summary}"
        )
        for line in saving.detail:
            out.print(f"    [dim]{line}[/dim]")
    total = sum(s.usd_per_year for s in report.savings)
    out.print(
        f"[bold]total[/bold] up to {money(total)}/year (the measures overlap: sleeping idle hours and sharing count the same idle GPUs)"
    )
    out.print(f"[dim]capex: {money(report.capex_usd)} ({report.capex_basis})[/dim]")
    render_inputs(report.inputs, out)


def render_upgrade(report: UpgradeReport, out: Any) -> None:
    from rich.table import Table

    out.print(
        f"[bold]dlrig plan upgrade[/bold] {report.machine}: {report.count} x {report.gpu.name}"
    )
    for limit in report.limits:
        verdict = {
            True: "[bold red]limits[/bold red]",
            False: "[green]fine[/green]",
            None: "[dim]not measured[/dim]",
        }[limit.limited]
        out.print(f"  {limit.area}: {verdict}")
        for line in limit.evidence:
            out.print(f"    [dim]{line}[/dim]")
    if not report.steps:
        out.print("no change to suggest from this evidence")
    else:
        table = Table(expand=False)
        for column in ("#", "term", "change", "gain", "cost"):
            table.add_column(column)
        for index, step in enumerate(report.steps, start=1):
            table.add_row(str(index), step.term, step.change, step.gain, money(step.cost_usd))
        out.print(table)
    render_inputs(report.inputs, out)

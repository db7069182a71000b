"""The readable report of `dlrig plan`: the ranked options, the best one's parts, the inputs."""

from __future__ import annotations

from typing import Any

from dlrig.plan.rank import Option, PlanResult
from dlrig.plan.render_check import render_inputs


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    hours = seconds / 3600
    if hours >= 48:
        return f"{hours / 24:.1f} d"
    if hours >= 1:
        return f"{hours:.1f} h"
    return f"{seconds / 60:.0f} min"


def money(usd: float | None) -> str:
    if usd is None:
        return "-"
    return f"${usd:,.0f}" if abs(usd) >= 100 else f"${usd:,.2f}"


def _fits(option: Option) -> str:
    marks = []
    for ev in option.evaluations.values():
        if not ev.fits:
            marks.append("no")
        elif ev.note and "PREDICTED" in ev.note:
            marks.append(f"~{ev.micro_batch}x{ev.grad_accum}")
        elif ev.grad_accum > 1:
            marks.append(f"{ev.micro_batch}x{ev.grad_accum}")
        else:
            marks.append("yes")
    return " ".join(marks)


def render_plan(result: PlanResult, out: Any, top: int = 15) -> None:
    from rich.table import Table

    names = [w.name for w in result.workloads]
    if not out.is_terminal:
        out.width = max(out.width, 150 + 45 * len(names))  # whole rows in files and pipes
    out.print(f"[bold]dlrig plan[/bold] for {', '.join(names)}")
    for w in result.workloads:
        size = (
            f"{w.epochs:g} epochs x {w.dataset_size:,} samples"
            if w.dataset_size
            else f"{w.tokens:,.0f} tokens"
            if w.tokens
            else "no size given (time per run unknown)"
        )
        runs = f"{w.runs_per_year:g} runs/year" + (
            "" if w.runs_given else " (default: say runs= or every=)"
        )
        out.print(
            f"  {w.name}: {w.model}, {size}, {runs}"
            + (f", deadline {w.deadline_hours:g} h" if w.deadline_hours else "")
        )
    feasible = sum(o.feasible for o in result.options)
    out.print(
        f"{len(result.options)} options ({feasible} feasible), {result.traces} trace(s) reused across {len(result.catalogue)} GPU x count pairs of the catalogue"
    )
    table = Table(expand=False)
    for column in (
        "#",
        "option",
        "fits",
        *[f"time {n}" for n in names],
        "capex",
        "wall W",
        "energy/yr",
        "TCO",
        *[f"$/run {n}" for n in names],
        "break-even",
    ):
        table.add_column(column, no_wrap=True)
    for rank, option in enumerate(result.options[:top], start=1):
        e = option.economics
        style = "" if option.feasible else "dim"
        label = option.label + (" *" if option.pareto else "")
        table.add_row(
            str(rank),
            f"[{style}]{label}[/]" if style else label,
            _fits(option),
            *[duration(option.evaluations[n].time_per_run_s) for n in names],
            money(e.capex_usd) if option.kind == "build" else "-",
            f"{e.power_wall_watts:,.0f}" if e.power_wall_watts else "-",
            money(e.energy_cost_usd_per_year),
            money(e.tco_usd),
            *[money(e.cost_per_run_usd.get(n)) for n in names],
            f"{option.break_even_months:.0f} mo" if option.break_even_months is not None else "-",
        )
    out.print(table)
    out.print(
        "[dim]fits: yes, MICROxACCUM (gradient accumulation keeps the global batch; ~ = predicted), no. * = on the Pareto front (time vs TCO)[/dim]"
    )
    shown = 0
    for option in result.options[:top]:
        if not option.feasible and shown < 5:
            out.print(f"[dim]{option.label}: {'; '.join(option.reasons[:3])}[/dim]")
            shown += 1
    best = result.best
    if best is None:
        out.print("[bold red]no option meets every constraint[/bold red]")
    else:
        _render_best(best, out, "best")
        build = next((o for o in result.options if o.feasible and o.kind == "build"), None)
        if build is not None and build is not best:
            _render_best(build, out, "best build")
    render_inputs(result.inputs, out)


def _render_best(option: Option, out: Any, title: str) -> None:
    months = option.break_even_months
    even = (
        f"; pays for itself against the cheapest cloud option in {months:.0f} months"
        if months is not None
        else ""
    )
    out.print(
        f"[bold green]{title}:[/bold green] {option.label} (TCO {money(option.economics.tco_usd)}{even})"
    )
    if option.candidate is not None:
        for part in option.candidate.parts:
            flag = " [yellow](ASSUMPTION)[/yellow]" if part.assumption else ""
            quantity = (
                f"{part.quantity:g} x "
                if part.quantity != 1 and part.kind not in ("ram", "storage")
                else ""
            )
            out.print(f"  {part.kind:9} {quantity}{part.name}: {money(part.total_usd)}{flag}")
        build = option.candidate.build
        if build.psu is not None:
            redundant = f" ({build.psu.redundant} redundant)" if build.psu.redundant else ""
            out.print(
                f"  power    PSU {build.psu.count} x {build.psu.watts:.0f} W{redundant}; {option.economics.power_wall_watts:,.0f} W at the wall while training"
            )
        for note in option.candidate.notes:
            out.print(f"  [dim]{note}[/dim]")
        if option.rules_warned:
            out.print(
                f"  [yellow]warnings[/yellow]: {', '.join(option.rules_warned)} (run `dlrig plan check` on the build for details)"
            )
    if option.offer is not None:
        o = option.offer
        out.print(
            f"  {o.provider} {o.instance}: {o.gpus} x {o.gpu}, ${o.usd_per_hour:,.3f}/h ({o.pricing}, {o.region}, {o.as_of})"
        )
        out.print(f"  [dim]price source: {o.source[:200]}[/dim]")
    for ev in option.evaluations.values():
        if ev.note:
            out.print(f"  [dim]{ev.workload}: {ev.note}[/dim]")

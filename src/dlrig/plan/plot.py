"""The Pareto plot of a plan: time to run every workload once against TCO, PNG."""

from __future__ import annotations

import io
from pathlib import Path

from dlrig.extras import pyplot
from dlrig.outputs import write_bytes_atomic
from dlrig.plan.rank import PlanResult


def pareto_png(result: PlanResult, path: str | Path) -> str:
    plt = pyplot("plan", "the Pareto plot")
    figure, axes = plt.subplots(figsize=(10, 6), dpi=100)
    for kind, marker, colour in (("build", "o", "tab:blue"), ("cloud", "^", "tab:orange")):
        points = [
            (o.cycle_hours, o.economics.tco_usd, o.pareto)
            for o in result.options
            if o.kind == kind and o.feasible and o.cycle_hours and o.economics.tco_usd
        ]
        if points:
            xs, ys, _ = zip(*points, strict=True)
            axes.scatter(
                xs, ys, marker=marker, color=colour, alpha=0.45, label=f"{kind} ({len(points)})"
            )
    front = sorted(
        (o for o in result.options if o.pareto and o.cycle_hours and o.economics.tco_usd),
        key=lambda o: o.cycle_hours or 0.0,
    )
    if front:
        axes.plot(
            [o.cycle_hours or 0.0 for o in front],
            [o.economics.tco_usd or 0.0 for o in front],
            color="black",
            linewidth=1,
            label="Pareto front",
        )
        for option in front[:12]:
            axes.annotate(
                option.label,
                (option.cycle_hours or 0.0, option.economics.tco_usd or 0.0),
                fontsize=7,
                xytext=(4, 4),
                textcoords="offset points",
            )
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("hours to run every workload once")
    axes.set_ylabel("TCO over the years of service (USD)")
    axes.set_title("dlrig plan: " + ", ".join(w.name for w in result.workloads))
    axes.grid(alpha=0.3, which="both")
    axes.legend(loc="upper right", fontsize="small")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(figure)
    write_bytes_atomic(path, buffer.getvalue())
    return str(path)

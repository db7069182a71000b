"""Text rendering of a history report."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dlrig.monitor.report import HistoryReport


def _when(unix: float | None) -> str:
    if unix is None:
        return "?"
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"


def render_report(report: HistoryReport, out: Any) -> None:
    from rich.table import Table

    out.print(f"[bold]History[/bold] {report.path}")
    if not report.gpus:
        out.print("no samples recorded yet")
        return
    out.print(
        f"from {_when(report.from_unix)} to {_when(report.to_unix)}"
        + (f", a sample every {report.interval_seconds:.1f} s" if report.interval_seconds else "")
    )
    table = Table(expand=False)
    for column in (
        "GPU",
        "time",
        "util mean",
        "0-10%",
        "10-50%",
        "50-90%",
        "90-100%",
        "idle periods",
        "throttled",
        "unavailable",
        "energy",
    ):
        table.add_column(column, no_wrap=True)
    for gpu in report.gpus:
        d = gpu.utilization_distribution
        table.add_row(
            f"{gpu.gpu} {(gpu.name or '').removeprefix('NVIDIA ')}",
            _duration(gpu.seconds),
            "?" if gpu.utilization_mean_percent is None else f"{gpu.utilization_mean_percent:.0f}%",
            *(f"{d.get(k, 0.0):.0%}" for k in ("0-10%", "10-50%", "50-90%", "90-100%")),
            f"{len(gpu.idle_periods)} ({_duration(gpu.idle_seconds)})",
            _duration(gpu.throttled_seconds),
            _duration(gpu.unavailable_seconds),
            "?" if gpu.energy_kwh is None else f"{gpu.energy_kwh:.3f} kWh",
        )
    out.print(table)
    for gpu in report.gpus:
        for period in gpu.idle_periods[:5]:
            out.print(
                f"GPU {gpu.gpu} idle {_duration(period.seconds)} from {_when(period.start_unix)}"
            )
        if gpu.throttled_seconds_by_reason:
            reasons = ", ".join(
                f"{reason} {_duration(seconds)}"
                for reason, seconds in sorted(
                    gpu.throttled_seconds_by_reason.items(), key=lambda kv: -kv[1]
                )
            )
            out.print(f"GPU {gpu.gpu} throttled: {reasons}")
    if report.energy_kwh is not None:
        line = f"energy: {report.energy_kwh:.3f} kWh"
        if report.cost is not None:
            line += f", cost {report.cost:.2f} {report.currency} at {report.price_per_kwh:g}/kWh"
        else:
            line += " (add --price-per-kwh for the cost)"
        out.print(line)
    for event in report.xid_events:
        out.print(
            f"[red]Xid {event['xid']}[/red] on GPU {event['gpu']} ({event['pci_bus_id']}) "
            f"at {_when(event['ts_unix'])}, {event['count']}x"
        )
    if report.host_cpu_mean_percent is not None:
        out.print(f"host CPU mean {report.host_cpu_mean_percent:.0f}%")
    for plot in report.plots:
        out.print(f"plot: {plot}")

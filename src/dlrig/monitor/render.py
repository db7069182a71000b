"""Text rendering of a history report."""

from __future__ import annotations

import textwrap
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


_TABLE_MIN_WIDTH = 120
_BANDS = ("0-10%", "10-50%", "50-90%", "90-100%")


def _name(gpu: Any) -> str:
    return f"{gpu.gpu} {(gpu.name or '').removeprefix('NVIDIA ')}".strip()


def _mean(gpu: Any) -> str:
    return "?" if gpu.utilization_mean_percent is None else f"{gpu.utilization_mean_percent:.0f}%"


def _energy(gpu: Any) -> str:
    return "?" if gpu.energy_kwh is None else f"{gpu.energy_kwh:.3f} kWh"


def _table(report: HistoryReport) -> Any:
    from rich.table import Table

    table = Table(expand=False)
    columns = ("GPU", "time", "util mean", *_BANDS, "idle periods", "throttled", "unavailable")
    for column in (*columns, "energy"):
        table.add_column(column, no_wrap=True)
    for gpu in report.gpus:
        d = gpu.utilization_distribution
        table.add_row(
            _name(gpu),
            _duration(gpu.seconds),
            _mean(gpu),
            *(f"{d.get(k, 0.0):.0%}" for k in _BANDS),
            f"{len(gpu.idle_periods)} ({_duration(gpu.idle_seconds)})",
            _duration(gpu.throttled_seconds),
            _duration(gpu.unavailable_seconds),
            _energy(gpu),
        )
    return table


def _block(gpu: Any) -> str:
    d = gpu.utilization_distribution
    bands = " · ".join(f"{k} {d.get(k, 0.0):.0%}" for k in _BANDS)
    return (
        f"[bold]GPU {_name(gpu)}[/bold], {_duration(gpu.seconds)} recorded\n"
        f"  utilisation  mean {_mean(gpu)}; {bands}\n"
        f"  idle         {len(gpu.idle_periods)} period(s), {_duration(gpu.idle_seconds)}\n"
        f"  throttled    {_duration(gpu.throttled_seconds)}; unavailable "
        f"{_duration(gpu.unavailable_seconds)}; energy {_energy(gpu)}"
    )


def render_report(report: HistoryReport, out: Any) -> None:
    out.print(f"[bold]History[/bold] {report.path}")
    if not report.gpus:
        out.print("no samples recorded yet")
        return
    out.print(
        f"from {_when(report.from_unix)} to {_when(report.to_unix)}"
        + (f", a sample every {report.interval_seconds:.1f} s" if report.interval_seconds else "")
    )
    if getattr(out, "width", 200) >= _TABLE_MIN_WIDTH:
        out.print(_table(report))
    else:
        # A narrow terminal, a cron mail: one block per GPU instead of a table cut to pieces.
        for gpu in report.gpus:
            out.print(_block(gpu))
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
            # Wrapped by hand: in a pipe the console does not wrap, and a mail is 80 columns.
            for line in textwrap.wrap(
                f"GPU {gpu.gpu} throttled: {reasons}", width=80, subsequent_indent="  "
            ):
                out.print(line)
    if report.energy_kwh is not None:
        line = f"energy: {report.energy_kwh:.3f} kWh"
        if report.cost is not None:
            line += f", cost {report.cost:.2f} {report.currency} at {report.price_per_kwh:g}/kWh"
        else:
            line += " (add --price-per-kwh for the cost)"
        out.print(line)
    for event in report.xid_events:
        out.print(
            f"[red]Xid {event.xid}[/red] on GPU {event.gpu} ({event.pci_bus_id}) "
            f"at {_when(event.ts_unix)}, {event.count}x"
        )
    if report.host_cpu_mean_percent is not None:
        out.print(f"host CPU mean {report.host_cpu_mean_percent:.0f}%")
    for plot in report.plots:
        out.print(f"plot: {plot}")

"""The readable summary of a bench report."""

from __future__ import annotations

from typing import Any

from dlrig.bench import BenchReport

_STYLE = {"ok": "green", "low": "bold red", "info": "cyan", "skip": "dim", "fail": "red"}


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if value < 10 else f"{value:.1f}"


def render(report: BenchReport, out: Any) -> None:
    from rich.table import Table

    if report.device is not None:
        where = report.device.spec.id if report.device.spec else report.device.name
        device = report.device
        if device.platform == "rocm":
            # torch's HIP build: "cuda" is torch's name for the device, not the platform
            built = f"ROCm, HIP {device.hip_version}" if device.hip_version else "ROCm"
            where = f"{where}, {device.gfx_target or 'gfx target unknown'}; {built}"
        out.print(f"[bold]dlrig bench[/bold] on {device.kind} ({where})")
    table = Table(expand=False)
    for column in ("part", "test", "measured", "expected", "%", "verdict"):
        table.add_column(column, no_wrap=True)
    for r in report.results:
        table.add_row(
            r.part,
            r.test,
            f"{_number(r.value)} {r.unit}",
            f"{_number(r.expected)} {r.unit}" if r.expected else "-",
            "-" if r.percent is None else f"{r.percent:.0f}%",
            f"[{_STYLE.get(r.verdict, '')}]{r.verdict}[/]",
        )
    out.print(table)
    comms = _comms_sizes(report)
    if comms is not None:
        out.print(comms)
    shown: set[str] = set()
    for r in report.results:
        paste = (r.part, r.test) == ("dataloader", "best_settings")
        if r.fix and (r.verdict == "low" or paste) and r.fix not in shown:
            shown.add(r.fix)
            out.print(f"[bold]{r.part} {r.test}[/bold] {'paste' if paste else 'fix'}: {r.fix}")
    for r in report.results:
        if r.note:
            out.print(f"[dim]{r.part} {r.test}: {r.note}[/dim]")


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def _comms_sizes(report: BenchReport) -> Any:
    """Each collective's time, algbw and busbw per message size, as nccl-tests prints them (the
    table above gives one figure: the busbw at the size where it peaked)."""
    from rich.table import Table

    found = [r for r in report.results if r.part == "comms" and r.detail.get("sizes")]
    if not found:
        return None
    table = Table(title="comms by message size (as nccl-tests defines them)", expand=False)
    for column in ("collective", "size", "time µs", "algbw GB/s", "busbw GB/s"):
        table.add_column(column, justify="left" if column == "collective" else "right")
    for r in found:
        for position, row in enumerate(sorted(r.detail["sizes"], key=lambda row: row["bytes"])):
            table.add_row(
                r.test if position == 0 else "",
                _size(int(row["bytes"])),
                f"{row['time_us']:,.0f}",
                _number(row.get("algbw_gbs")),
                _number(row["busbw_gbs"]),
            )
        table.add_section()
    return table

"""Readable reports for `dlrig pack`, `pack verify` and `pack bench`."""

from __future__ import annotations

from typing import Any

from dlrig.pack.verify import VerifyReport
from dlrig.pack.writer import PackReport

_SHOWN = 50


def size_text(size: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} bytes"


def _mib(size: int) -> str:
    return f"{size / (1 << 20):.0f} MiB" if size >= 1 << 20 else size_text(size)


def render_pack(report: PackReport, out: Any) -> None:
    rate = report.samples / report.seconds if report.seconds > 0 else 0.0
    out.print(
        f"[bold]packed[/bold] {report.samples:,} samples ({size_text(report.data_bytes)}) from "
        f"{report.source['location']} into {report.shards} {report.fmt} shards at {report.dst}"
    )
    out.print(
        f"  {report.seconds:.1f} s, {rate:,.0f} samples/s, "
        f"{report.data_bytes / 1e6 / max(report.seconds, 1e-9):,.0f} MB/s, {report.jobs} jobs"
    )
    where = report.fstype or "filesystem unknown"
    if report.shard_size_reason == "--shard-size":
        why = "given with --shard-size"
    else:
        why = f"{report.storage}-storage default {_mib(report.shard_bytes_default)}"
        if report.shard_bytes_target < report.shard_bytes_default:
            why += f", made smaller (to 32 MiB at least) so {report.jobs} jobs pack in parallel"
    out.print(f"  shard size {_mib(report.shard_bytes_target)} ({where}: {why})")
    if report.resumed_shards:
        out.print(f"  resumed: {report.resumed_shards} finished shards kept from before")
    if report.skipped:
        out.print(f"[yellow]left out {len(report.skipped)} unreadable files (--skip-bad):[/yellow]")
        for item in report.skipped[:_SHOWN]:
            out.print(f"  {item['name']}: {item['error']}")
        if len(report.skipped) > _SHOWN:
            out.print(f"  … and {len(report.skipped) - _SHOWN} more (see --json)")
    out.print(f"next: dlrig pack verify {report.dst}")


def render_verify(report: VerifyReport, out: Any) -> None:
    summary = (
        f"{report.shards} shards, {report.samples_checked:,} of {report.samples:,} samples, "
        f"{size_text(report.data_bytes)} checked in {report.seconds:.1f} s"
    )
    if report.ok:
        out.print(f"[green]intact[/green]: {report.dst} ({summary})")
        return
    named = [d for d in report.damage if d.name is not None]
    out.print(
        f"[red]damaged[/red]: {report.dst}: {len(named)} damaged samples, "
        f"{len(report.damage) - len(named)} shard problems ({summary})"
    )
    for damage in report.damage[:_SHOWN]:
        out.print(f"  {damage.line()}")
    if len(report.damage) > _SHOWN:
        out.print(f"  … and {len(report.damage) - _SHOWN} more (see --json)")
    out.print("fix: repack the damaged shards' sources (`dlrig pack SRC DST --overwrite`)")


def render_bench(results: list[Any], out: Any) -> None:
    from rich.table import Table

    table = Table(title="packed vs loose (samples/s)")
    for column in (
        "reader",
        "stage",
        "cache",
        "order",
        "procs",
        "samples/s",
        "MB/s",
        "cache check",
    ):
        table.add_column(
            column, justify="right" if column in ("samples/s", "MB/s", "procs") else "left"
        )
    for result in results:
        detail = result.detail
        if "reader" not in detail:
            continue
        seconds = detail["seconds"] or 1e-9
        table.add_row(
            detail["reader"],
            detail["stage"],
            detail["cache"],
            detail["order"],
            str(detail["workers"]),
            f"{result.value:,.0f}",
            f"{detail['bytes'] / 1e6 / seconds:,.0f}",
            f"ok ({detail['resident_percent_before']}% resident)"
            if detail["cache_verified"]
            else f"NOT {detail['cache']} ({detail['resident_percent_before']}%)",
        )
    out.print(table)
    for result in results:
        if result.verdict == "skip" and result.note:
            out.print(f"{result.test}: {result.note}")
        if result.unit == "x":
            verdict = "" if result.verdict == "info" else f" [{result.verdict}]"
            out.print(f"{result.test}: {result.value}×{verdict}")
            if result.fix:
                out.print(f"  fix: {result.fix}")

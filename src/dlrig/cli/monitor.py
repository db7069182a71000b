"""`dlrig monitor`: what are my GPUs doing right now (live view, exporter, history, alerts)?

A thin shell over `dlrig.monitor`: the library samples, serves and records; this module turns
options into calls and waits. Stopping is `dlrig.lifecycle`'s: SIGINT, SIGTERM and SIGHUP raise
`Stopped` wherever the command is waiting, every `with`/`finally` below releases what it holds
(NVML, the port, the terminal, the history), and `dlrig` exits 130/143/129.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from dlrig import monitor
from dlrig.cli import monitor_live
from dlrig.cli.common import (
    choice_option,
    console,
    integer_option,
    json_option,
    number_option,
    print_json,
    print_report,
)
from dlrig.cli.monitor_options import (
    GROUP_VALUES,
    duration_option,
    out_option,
    out_path,
    remember_group_values,
    source_options,
    source_settings,
)
from dlrig.cli.monitor_record import record_capture, record_history
from dlrig.errors import InputError
from dlrig.monitor import report as history_report
from dlrig.monitor.assets import write_assets
from dlrig.monitor.processes import SORT_KEYS, ProcessOptions
from dlrig.monitor.render import render_report
from dlrig.plain import word
from dlrig.report import envelope

_STOPPED = "130/143/129 stopped by SIGINT/SIGTERM/SIGHUP, after releasing NVML and the terminal"
MONITOR_EXIT = (
    "Exit codes: 0 shown (also where no GPU can be read: the view says why); 2 bad usage or a "
    f"--replay file that cannot be read; {_STOPPED}."
)
SERVE_EXIT = (
    "Exit codes: 0 stopped after --duration; 2 bad usage, a port that cannot be bound or a --db "
    f"that cannot be opened (said at once); {_STOPPED} (systemd stops with SIGTERM: 143)."
)
RECORD_EXIT = (
    "Exit codes: 0 recorded; 1 nvidia-smi failed (--out) or the history could not be written "
    f"(--db; what was written is kept); 2 bad usage or input; {_STOPPED}; the summary is "
    "printed either way."
)
REPORT_EXIT = "Exit codes: 0 reported; 2 not a history database, or bad options."
ASSETS_EXIT = "Exit codes: 0 written; 2 the folder cannot be created or written."


@click.group("monitor", invoke_without_command=True, epilog=MONITOR_EXIT)
@source_options
@click.option("--once", is_flag=True, help="Print one reading and exit (with --json for scripts).")
@choice_option(
    "--format",
    "output_format",
    choices=("view", "lines", "json"),
    default="view",
    help="view: the live view (redrawn on a terminal, a frame per sample in a pipe or file); "
    "lines: one key=value line per GPU per sample; json: one document per sample per line.",
)
@integer_option("--count", min=1, help="Stop after this many samples (default: run until stopped).")
@choice_option(
    "--sort",
    choices=SORT_KEYS,
    default="gpu",
    help="Order of the process list: by GPU (then GPU memory), or by GPU memory, SM %, CPU %, "
    "host RSS or run time (longest first), or pid.",
)
@click.option("--tree", is_flag=True, help="Show GPU processes under their parent process.")
@click.option(
    "--filter",
    "process_filter",
    metavar="TEXT",
    help="Show only processes whose user, command or container contains TEXT.",
)
@json_option
@click.pass_context
def monitor_command(
    ctx: click.Context,
    /,
    once: bool,
    output_format: str,
    count: int | None,
    sort: str,
    tree: bool,
    process_filter: str | None,
    as_json: bool,
    **values: Any,
) -> None:
    """Live view of the GPUs and the host, with a one-line reading of what it means.

    Subcommands: serve (Prometheus exporter), record (capture or history), report (history
    summary), assets (alert rules and Grafana dashboards). Source options (--replay,
    --interval, --gpu-index, ...) can be given here or to the subcommand."""
    if ctx.invoked_subcommand is not None:
        for given, name in (
            (once, "--once"),
            (count, "--count"),
            (output_format != "view", "--format"),
            (sort != "gpu", "--sort"),
            (process_filter is not None, "--filter"),
            (tree, "--tree"),
        ):
            if given:
                raise InputError(
                    f"{name} is for the live view, not `monitor {ctx.invoked_subcommand}`",
                    fix=f"drop {name}, or drop the subcommand",
                )
        remember_group_values(ctx, {**values, "as_json": as_json})
        return
    if as_json and not once:
        raise InputError(
            "--json needs --once",
            fix="add --once for a single JSON reading, or use --format json for one per sample",
        )
    if once and (count is not None or output_format != "view"):
        raise InputError(
            "--once takes no --count or --format",
            fix="use --once --json, or --count 1 --format ...",
        )
    settings = source_settings(ctx, values)
    processes = ProcessOptions(
        sort=word(SORT_KEYS, sort, "--sort"), filter=process_filter, tree=tree
    )
    if once:
        monitor_live.once(settings, as_json, processes)
    else:
        redraw = output_format == "view" and console().is_terminal
        monitor_live.watch(settings, output_format, count, redraw, processes)


@monitor_command.command("serve", epilog=SERVE_EXIT)
@source_options
@click.option("--port", type=int, default=9480, show_default=True, help="TCP port for /metrics.")
@click.option(
    "--listen",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind; 0.0.0.0 (or ::) exposes the exporter to the network.",
)
@click.option(
    "--dcgm-names",
    is_flag=True,
    help="Use dcgm-exporter's metric names and labels (its Grafana dashboards work as is).",
)
@click.option(
    "--amd-names",
    is_flag=True,
    help="Use AMD device-metrics-exporter's metric names and labels (gpu_gfx_activity, ...).",
)
@click.option("--db", help="Also record the samples here.")
@duration_option
@click.pass_context
def serve_command(
    ctx: click.Context,
    /,
    port: int,
    listen: str,
    dcgm_names: bool,
    amd_names: bool,
    db: str | None,
    duration: float | None,
    **values: Any,
) -> None:
    """Prometheus exporter: serve the last sample at http://LISTEN:PORT/metrics."""
    if not 0 <= port <= 65535:
        raise InputError(
            f"--port {port} is not a TCP port", fix="give a port from 1 to 65535 (0: any free)"
        )
    if dcgm_names and amd_names:
        raise InputError(
            "--dcgm-names and --amd-names both given", fix="choose one naming of the series"
        )
    settings = source_settings(ctx, values)
    exporter = monitor.ExporterService(
        settings.open(),
        port=port,
        listen=listen,
        dcgm_names=dcgm_names,
        amd_names=amd_names,
        db=db,
        **settings.sampling(),
    )
    with exporter:
        host, bound = exporter.address
        info = exporter.source.info
        err = console(stderr=True)
        if info.note:
            err.print(f"dlrig monitor: {info.note}")
        err.print(
            f"dlrig monitor: serving {info.description} at http://{host}:{bound}/metrics "
            f"(every {settings.interval:g} s{', dcgm-exporter names' if dcgm_names else ''}"
            f"{', AMD device-metrics-exporter names' if amd_names else ''})"
        )
        _wait(duration)


def _wait(seconds: float | None) -> None:
    """Sleep `seconds`, or until a stop signal raises `Stopped` (an Event wait is interrupted
    by it, as a sleep is)."""
    import threading

    threading.Event().wait(seconds)


def _group_json(ctx: click.Context, as_json: bool) -> bool:
    """--json given to the subcommand, or to the group before it (`monitor --json report F`)."""
    return as_json or bool(ctx.meta.get(GROUP_VALUES, {}).get("as_json"))


@monitor_command.command("record", epilog=RECORD_EXIT)
@source_options
@out_option("Capture this machine's nvidia-smi outputs (for --replay) into FILE.", "--to")
@click.option(
    "--state",
    default="idle",
    show_default=True,
    help="Name of the machine state being captured with --out (idle, load, ...).",
)
@click.option("--db", help="Record samples into SQLite.")
@duration_option
@number_option("--max-age-days", min=0, min_open=True, default=30.0, help="History kept (--db).")
@number_option("--max-size-mb", min=0, min_open=True, default=1024.0, help="History size cap.")
@json_option
@click.pass_context
def record_command(
    ctx: click.Context,
    /,
    out: str | None,
    legacy_out: str | None,
    state: str,
    db: str | None,
    duration: float | None,
    max_age_days: float,
    max_size_mb: float,
    as_json: bool,
    **values: Any,
) -> None:
    """Record: a replayable nvidia-smi capture (--out FILE) or a sample history (--db FILE)."""
    capture = out_path(out, legacy_out, "--to")
    as_json = _group_json(ctx, as_json)
    if bool(capture) == bool(db):
        raise InputError(
            "record needs exactly one of --out FILE or --db FILE",
            fix="--out for a replayable capture, --db for a history",
        )
    if capture:
        record_capture(Path(capture), state, as_json)
        return
    assert db is not None
    if max_age_days <= 0 or max_size_mb <= 0:
        raise InputError("--max-age-days and --max-size-mb must be positive", fix="give > 0")
    settings = source_settings(ctx, values)
    record_history(settings, db, duration, max_age_days, max_size_mb, as_json)


@monitor_command.command("report", epilog=REPORT_EXIT)
@click.argument("db")
@out_option("Write PNG plots of the history into this folder.", "--plots")
@number_option("--price-per-kwh", min=0, help="Electricity price, for the energy cost.")
@click.option("--currency", default="USD", show_default=True)
@number_option("--idle-below", min=0, max=100, default=5.0, help="Idle threshold, % util.")
@number_option("--idle-min-seconds", min=0, default=60.0, help="Shortest idle period listed.")
@number_option("--last-hours", min=0, min_open=True, help="Only the last N hours of the history.")
@json_option
@click.pass_context
def report_command(
    ctx: click.Context,
    /,
    db: str,
    out: str | None,
    legacy_out: str | None,
    price_per_kwh: float | None,
    currency: str,
    idle_below: float,
    idle_min_seconds: float,
    last_hours: float | None,
    as_json: bool,
) -> None:
    """Summarise a history: utilisation, idle periods, throttling, energy and its cost."""
    import dataclasses

    plots = out_path(out, legacy_out, "--plots")
    as_json = _group_json(ctx, as_json)
    since = time.time() - last_hours * 3600 if last_hours else None
    result = history_report.build(
        db,
        idle_below_percent=idle_below,
        idle_min_seconds=idle_min_seconds,
        price_per_kwh=price_per_kwh,
        currency=currency,
        since_unix=since,
    )
    if plots:
        written = history_report.write_plots(db, plots, since_unix=since)
        result = dataclasses.replace(result, plots=tuple(written))
    print_report(result, as_json, render_report)


@monitor_command.command("assets", epilog=ASSETS_EXIT)
@out_option(
    "Folder to write the alert rules, their tests, the Grafana dashboard and a scrape config into.",
    "--to",
)
@click.option(
    "--dcgm-names",
    is_flag=True,
    help="The rules and dashboard for dcgm-exporter's metric names (`serve --dcgm-names`, or "
    "NVIDIA's dcgm-exporter itself).",
)
@json_option
@click.pass_context
def assets_command(
    ctx: click.Context, /, out: str | None, legacy_out: str | None, dcgm_names: bool, as_json: bool
) -> None:
    """Write the Prometheus alert rules and the Grafana dashboard shipped with dlrig."""
    folder = out_path(out, legacy_out, "--to")
    if not folder:
        raise InputError("assets needs --out DIR", fix="name the folder to write into")
    as_json = _group_json(ctx, as_json)
    written = write_assets(Path(folder), dcgm_names=dcgm_names)
    if as_json:
        names = "dcgm" if dcgm_names else "dlrig"
        body = {"names": names, "written": [str(path) for path in written]}
        print_json(envelope("dlrig.monitor.assets", 1, body))
        return
    out_console = console()
    for path in written:
        out_console.print(str(path))

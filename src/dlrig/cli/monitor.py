"""`dlrig monitor`: what are my GPUs doing right now (live view, exporter, history, alerts)?"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from dlrig.cli.common import console, console_wide, json_option, print_json
from dlrig.errors import DlrigError, InputError

F = TypeVar("F", bound=Callable[..., Any])


def source_options(function: F) -> F:
    """Where readings come from: NVML, or recorded files."""
    options = [
        click.option(
            "--replay",
            "replay",
            multiple=True,
            metavar="FILE",
            help="Replay recorded nvidia-smi output (-q -x XML, --query-gpu CSV, -q text, a "
            "capture from `monitor record --to`, a kernel log for Xid events). Repeatable.",
        ),
        click.option(
            "--replay-state", help="Replay only this state of a capture (e.g. idle, load)."
        ),
        click.option(
            "--frame-seconds",
            type=float,
            default=30.0,
            show_default=True,
            help="Seconds each replayed state/file is shown before the next.",
        ),
        click.option(
            "--replicate",
            type=int,
            help="Replay each recorded GPU N times (to try an N-GPU setup with a 1-GPU file).",
        ),
        click.option(
            "--interval",
            type=float,
            default=1.0,
            show_default=True,
            help="Seconds between samples.",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _open(
    replay: tuple[str, ...],
    replay_state: str | None,
    frame_seconds: float,
    replicate: int | None,
    interval: float,
) -> Any:
    from dlrig import monitor

    if not 0.05 <= interval <= 3600:
        raise InputError(
            f"--interval {interval} is out of range", fix="give seconds between 0.05 and 3600"
        )
    return monitor.open_source(replay, replay_state, frame_seconds, replicate)


def _run_until_signal(seconds: float | None, stop: threading.Event | None = None) -> None:
    """Sleep until SIGINT/SIGTERM (systemd stops services with SIGTERM), `seconds` pass, or
    `stop` is set."""
    stop = stop or threading.Event()

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        stop.wait(seconds)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


@click.group("monitor", invoke_without_command=True)
@source_options
@click.option("--once", is_flag=True, help="Print one reading and exit (with --json for scripts).")
@json_option
@click.pass_context
def monitor_command(
    ctx: click.Context,
    replay: tuple[str, ...],
    replay_state: str | None,
    frame_seconds: float,
    replicate: int | None,
    interval: float,
    once: bool,
    as_json: bool,
) -> None:
    """Live view of the GPUs and the host, with a one-line reading of what it means.

    Subcommands: serve (Prometheus exporter), record (capture or history), report (history
    summary), assets (alert rules and Grafana dashboard)."""
    if ctx.invoked_subcommand is not None:
        return
    from dlrig import monitor
    from dlrig.monitor import live

    if as_json and not once:
        raise InputError("--json needs --once", fix="add --once for a single JSON reading")
    source = _open(replay, replay_state, frame_seconds, replicate, interval)
    if once:
        samples = monitor.once(source, host=not replay)
        readings = monitor.read_situation(samples)
        if as_json:
            print_json(monitor.sample_document(samples[-1], source.info, readings))
        else:
            console_wide().print(live.render(samples, title=source.info.description))
        return
    sampler = monitor.Sampler(source, interval_seconds=interval, host=not replay).start()
    out = console_wide()
    from rich.live import Live

    try:
        with Live(
            live.render([], source.info.description),
            console=out,
            refresh_per_second=4,
            screen=False,
        ) as view:
            last = 0
            while True:
                sample = sampler.wait_for_sample(after=last, timeout=interval * 5)
                if sample is not None and sample.sequence != last:
                    last = sample.sequence
                    view.update(live.render(sampler.history(), source.info.description))
    except KeyboardInterrupt:
        pass
    finally:
        sampler.stop()


@monitor_command.command("serve")
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
@click.option("--db", help="Also record the samples here.")
@click.option("--duration", type=float, help="Stop after this many seconds (default: run).")
def serve_command(
    replay: tuple[str, ...],
    replay_state: str | None,
    frame_seconds: float,
    replicate: int | None,
    interval: float,
    port: int,
    listen: str,
    dcgm_names: bool,
    db: str | None,
    duration: float | None,
) -> None:
    """Prometheus exporter: serve the last sample at http://LISTEN:PORT/metrics."""
    from dlrig import monitor
    from dlrig.monitor.exporter import ExporterOptions, MetricsPage, MetricsServer
    from dlrig.monitor.history import BackgroundWriter, HistoryWriter

    if not 0 <= port <= 65535:
        raise InputError(
            f"--port {port} is not a TCP port", fix="give a port from 1 to 65535 (0: any free)"
        )
    source = _open(replay, replay_state, frame_seconds, replicate, interval)
    with contextlib.ExitStack() as cleanup:
        # Whatever fails to start, what did start is stopped again (NVML, threads, sockets).
        cleanup.callback(source.close)
        sampler = monitor.Sampler(source, interval_seconds=interval, host=not replay)
        page = MetricsPage(source.info, ExporterOptions(dcgm_names=dcgm_names), sampler)
        server = MetricsServer(page, listen, port)
        cleanup.callback(server.stop)
        sampler.add_listener(page.update)
        writer = BackgroundWriter(HistoryWriter(db, source=source.info.description)) if db else None
        if writer is not None:
            sampler.add_listener(writer)
        cleanup.pop_all()
    sampler.start()
    server.start()
    host, bound = server.address
    err = console(stderr=True)
    err.print(
        f"dlrig monitor: serving {source.info.description} at http://{host}:{bound}/metrics "
        f"(every {interval:g} s{', dcgm-exporter names' if dcgm_names else ''})"
    )
    try:
        _run_until_signal(duration)
    finally:
        server.stop()
        stopped = sampler.stop()
        if writer is not None and stopped:
            writer.close()


@monitor_command.command("record")
@source_options
@click.option(
    "--to",
    "to_file",
    help="Capture this machine's nvidia-smi outputs (for --replay) into FILE.",
)
@click.option(
    "--state",
    default="idle",
    show_default=True,
    help="Name of the machine state being captured with --to (idle, load, ...).",
)
@click.option("--db", help="Record samples into SQLite.")
@click.option("--duration", type=float, help="Stop after this many seconds (default: run).")
@click.option(
    "--max-age-days", type=float, default=30.0, show_default=True, help="History kept (--db)."
)
@click.option(
    "--max-size-mb", type=float, default=1024.0, show_default=True, help="History size cap."
)
@json_option
def record_command(
    replay: tuple[str, ...],
    replay_state: str | None,
    frame_seconds: float,
    replicate: int | None,
    interval: float,
    to_file: str | None,
    state: str,
    db: str | None,
    duration: float | None,
    max_age_days: float,
    max_size_mb: float,
    as_json: bool,
) -> None:
    """Record: a replayable nvidia-smi capture (--to) or a sample history (--db)."""
    if bool(to_file) == bool(db):
        raise InputError(
            "record needs exactly one of --to FILE or --db FILE",
            fix="--to for a replayable capture, --db for a history",
        )
    if to_file:
        from dlrig.machine import recorder
        from dlrig.outputs import write_text_atomic

        path = Path(to_file)
        existing = None
        if path.exists():
            from dlrig.inputs import read_text

            existing = read_text(path, "capture", 200 * 1000 * 1000)
        text = recorder.record(state, existing)
        write_text_atomic(path, text)
        if as_json:
            print_json(_record_document(capture=str(path), state=state))
        else:
            console(stderr=True).print(
                f"recorded state {state!r} to {path}; replay it with "
                f"`dlrig monitor --replay {path}`"
            )
        return
    from dlrig import monitor
    from dlrig.monitor.history import BackgroundWriter, HistoryWriter, Retention

    if max_age_days <= 0 or max_size_mb <= 0:
        raise InputError("--max-age-days and --max-size-mb must be positive", fix="give > 0")
    assert db is not None
    source = _open(replay, replay_state, frame_seconds, replicate, interval)
    try:
        writer = BackgroundWriter(
            HistoryWriter(
                db,
                Retention(max_age_seconds=max_age_days * 86400, max_bytes=int(max_size_mb * 1e6)),
                source=source.info.description,
            )
        )
    except BaseException:
        source.close()
        raise
    sampler = monitor.Sampler(source, interval_seconds=interval, host=not replay)
    failed: list[BaseException] = []
    stop = threading.Event()

    def write(sample: Any) -> None:
        # A recorder that cannot write (disk full, file removed) stops and says why.
        try:
            writer(sample)
        except Exception as exc:  # noqa: BLE001 - reported as the command's error below
            failed.append(exc)
            stop.set()

    sampler.add_listener(write)
    sampler.start()
    console(stderr=True).print(
        f"dlrig monitor: recording {source.info.description} into {db} every {interval:g} s"
    )
    try:
        _run_until_signal(duration, stop)
    finally:
        if sampler.stop():
            writer.close()
    failed += [writer.error] if writer.error is not None and not failed else []
    if failed:
        raise DlrigError(
            f"{db}: cannot write the history ({failed[0]})",
            fix="free disk space or record to another file; the samples written so far are kept",
        )
    summary = {
        "db": db,
        "samples_written": writer.writer.samples_written,
        "samples_dropped": writer.dropped,
    }
    if as_json:
        print_json(_record_document(**summary))
    else:
        console(stderr=True).print(
            f"wrote {summary['samples_written']} samples to {db}"
            + (f" ({writer.dropped} dropped: the disk fell behind)" if writer.dropped else "")
        )


def _record_document(**fields: Any) -> dict[str, Any]:
    return {"schema": "dlrig.monitor.record", "schema_version": 1, **fields}


@monitor_command.command("report")
@click.argument("db")
@click.option("--plots", help="Write PNG plots into DIR.")
@click.option("--price-per-kwh", type=float, help="Electricity price, for the energy cost.")
@click.option("--currency", default="USD", show_default=True)
@click.option(
    "--idle-below", type=float, default=5.0, show_default=True, help="Idle threshold, % util."
)
@click.option(
    "--idle-min-seconds",
    type=float,
    default=60.0,
    show_default=True,
    help="Shortest idle period listed.",
)
@click.option("--last-hours", type=float, help="Only the last N hours of the history.")
@json_option
def report_command(
    db: str,
    plots: str | None,
    price_per_kwh: float | None,
    currency: str,
    idle_below: float,
    idle_min_seconds: float,
    last_hours: float | None,
    as_json: bool,
) -> None:
    """Summarise a history: utilisation, idle periods, throttling, energy and its cost."""
    import dataclasses

    from dlrig.monitor import report as history_report

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
    if as_json:
        print_json(result.to_dict())
        return
    from dlrig.monitor.render import render_report

    render_report(result, console())


@monitor_command.command("assets")
@click.option(
    "--to",
    "to_dir",
    required=True,
    help="Directory to write the alert rules, their tests, and the Grafana dashboard into.",
)
@json_option
def assets_command(to_dir: str, as_json: bool) -> None:
    """Write the Prometheus alert rules and the Grafana dashboard shipped with dlrig."""
    from dlrig.monitor.assets import write_assets

    written = write_assets(Path(to_dir))
    if as_json:
        print_json(
            {
                "schema": "dlrig.monitor.assets",
                "schema_version": 1,
                "written": [str(path) for path in written],
            }
        )
        return
    out = console()
    for path in written:
        out.print(str(path))

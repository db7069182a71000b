"""`dlrig accept`: prove a new or repaired server (doctor, bench, burn-in, verdicts)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from dlrig import accept, lifecycle
from dlrig.accept.render import render
from dlrig.cli.common import choice_option, console, integer_option, json_option, print_json
from dlrig.errors import InputError

EXIT = (
    "Exit codes: 0 every verdict passes; 1 a verdict fails (the summary says what to do first); "
    "2 bad usage or a --replay/--machine file that cannot be read; 130/143/129 stopped by "
    "SIGINT/SIGTERM/SIGHUP (the load is stopped and the partial document written first)."
)


class _Progress:
    """A rich bar on terminals; elsewhere one line per stage, and the burn-in every 10%, so
    a run in a log or under nohup still says where it is."""

    def __init__(self) -> None:
        self.err = console(stderr=True)
        self.bar: Any = None
        self.task: Any = None
        self.last_label = ""
        self.last_step = -1
        self.started = time.monotonic()

    def __enter__(self) -> _Progress:
        if self.err.is_terminal:
            from rich.progress import (
                BarColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TimeElapsedColumn(),
                TextColumn("left"),
                TimeRemainingColumn(),
                console=self.err,
                transient=True,
            )
            self.bar.__enter__()
            self.task = self.bar.add_task("accept", total=1.0)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)

    def __call__(self, label: str, fraction: float) -> None:
        if self.bar is not None:
            self.bar.update(self.task, description=label, completed=fraction)
            return
        # One line per stage ("doctor", "bench compute", "burn-in: 4 load worker(s)": a
        # worker that stops shows), not per step of it; the burn-in every tenth.
        words = label.split(":", 1)[0].split()
        stage = " ".join(words[:2]) if words[:1] == ["bench"] else " ".join(words[:1])
        if stage == "burn-in":
            stage = label.split(",", 1)[0]
        step = int(fraction * 10) if stage.startswith("burn-in") else 0
        if stage != self.last_label or step != self.last_step:
            self.last_label, self.last_step = stage, step
            elapsed = time.monotonic() - self.started
            self.err.print(f"dlrig accept [{elapsed:6.1f} s] {label}")


@click.command("accept", epilog=EXIT)
@choice_option(
    "--level",
    choices=("quick", "medium", "long"),
    default="medium",
    help="How much runs, as DCGM's diag levels: quick (compute, memory, storage; 1-minute "
    "burn-in), medium (every bench part, short; 5 minutes), long (every part, full; 15 minutes).",
)
@click.option(
    "--minutes", type=float, metavar="N", help="Burn-in length in minutes (default: the level's)."
)
@click.option(
    "--out",
    "out",
    metavar="DIR",
    help="Folder for accept.json, history.db and report.html (default: ./accept-HOST-TIME).",
)
@click.option(
    "--replay",
    multiple=True,
    metavar="FILE",
    help="Judge recorded evidence instead of this machine (nvidia-smi -q -x, -q, --query-gpu "
    "CSV, a capture, a kernel log, a snapshot); no load is generated. Repeatable.",
)
@integer_option(
    "--gpu-index",
    min=0,
    multiple=True,
    metavar="N",
    help="Only this GPU (NVML's index). Repeatable; default every GPU.",
)
@click.option(
    "--path",
    metavar="DIR",
    help="Where the storage test and the disk load write (the dataset's disk; default --out).",
)
@click.option("--machine", metavar="SNAPSHOT", help="Use this machine's facts (doctor --save).")
@click.option(
    "--skip",
    multiple=True,
    metavar="PART",
    help="A bench part not to run (compute, memory, comms, storage, dataloader), or 'bench' "
    "for none. Repeatable.",
)
@json_option
def accept_command(
    level: str,
    minutes: float | None,
    out: str | None,
    replay: tuple[str, ...],
    gpu_index: tuple[int, ...],
    path: str | None,
    machine: str | None,
    skip: tuple[str, ...],
    as_json: bool,
) -> None:
    """Prove a new or repaired server: doctor, then every bench part, then a burn-in with load
    on every GPU, the CPU, memory and the disk while the monitor records; verdicts with their
    evidence and fixes. With --replay, judge recorded readings instead."""
    if replay and (minutes is not None or machine or gpu_index or path or skip):
        raise InputError(
            "--replay judges recorded files: --minutes, --machine, --gpu-index, --path and "
            "--skip are for a live run",
            fix="drop them, or drop --replay",
        )
    options = accept.AcceptOptions(
        level=level,
        minutes=minutes,
        out_dir=out,
        replay=replay,
        gpu_indices=gpu_index,
        path=path,
        machine=machine,
        skip=skip,
    )
    with _Progress() as progress:
        result = accept.run(options, progress=progress)
    written = [str(p) for p in result.write()]
    document = result.to_dict()
    history = document["files"]["history_db"]
    if history and Path(history).is_file():
        written.insert(1, history)  # the monitor wrote it during the burn-in
    if as_json:
        print_json(document)
    else:
        render(document, console(), written)
    if result.report_error:
        console(stderr=True).print(f"report.html not written: {result.report_error}", markup=False)
    if result.stop_signal is not None:
        sys.stdout.flush()  # before dlrig's exit points stdout at /dev/null
        raise lifecycle.Stopped(result.stop_signal)
    if result.failed:
        sys.exit(1)

"""`dlrig doctor`: is this machine set up right?"""

from __future__ import annotations

import difflib
import os
import sys
from pathlib import Path

import click

from dlrig import causes, doctor
from dlrig.cli.common import (
    console,
    integer_option,
    json_option,
    number_option,
    print_json,
    print_report,
)
from dlrig.doctor import fleet as fleet_report
from dlrig.doctor.render import render_markdown, render_text
from dlrig.errors import InputError
from dlrig.machine import probe, readers
from dlrig.machine.model import Machine
from dlrig.machine.runner import ProbeContext
from dlrig.outputs import write_text_atomic

# A probe that has not answered in an hour never will; the bound also keeps deadlines
# representable (a timeout of 1e308 s overflows the clock).
_MAX_TIMEOUT_S = 3600.0


@click.command("doctor")
@click.option(
    "--from",
    "from_path",
    type=click.Path(path_type=Path),
    multiple=True,
    metavar="FILE",
    help="Check recorded evidence instead of this machine: a saved snapshot, "
    "`nvidia-smi -q -x` XML, `nvidia-smi -q` text, --query-gpu CSV, the plain `nvidia-smi` "
    "table, a capture, `python -m torch.utils.collect_env` output, or a kernel log (dmesg, "
    "journalctl -k); gzip is fine, `-` reads stdin. Repeatable: the files of one machine are "
    "merged; files of different machines are refused.",
)
@click.option(
    "--save",
    "save_path",
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="Also write the machine snapshot as JSON (read it back with --from).",
)
@click.option("--markdown", is_flag=True, help="Print Markdown to paste into a bug report.")
@json_option
@click.option("--explain", "explain_id", metavar="CHECK_ID", help="Explain one check and exit.")
@click.option("--list-checks", is_flag=True, help="List every check and exit.")
@click.option(
    "--python",
    "python",
    metavar="PATH",
    help="Inspect the frameworks of this Python interpreter (default: the one running dlrig).",
)
@click.option(
    "--data-path",
    "data_paths",
    multiple=True,
    metavar="DIR",
    help="A directory that holds training data (its disk is checked); repeatable.",
)
@number_option(
    "--ram-ratio",
    min=0.1,
    max=100,
    default=1.5,
    help="Wanted host RAM as a multiple of total GPU memory.",
)
@integer_option("--min-cores-per-gpu", min=1, default=4, help="Wanted physical CPU cores per GPU.")
@number_option(
    "--timeout",
    "timeout_s",
    min=0.5,
    max=_MAX_TIMEOUT_S,
    default=10.0,
    help=f"Seconds each probe may take (0.5 to {_MAX_TIMEOUT_S:.0f}).",
)
@click.option("--no-kernel-log", is_flag=True, help="Do not read dmesg for Xid errors.")
@click.option(
    "--fleet",
    is_flag=False,
    flag_value="srun",
    default=None,
    metavar="[DIR|FILES]",
    help="Compare nodes: alone, run doctor on every Slurm node through srun; with a folder or "
    "comma-separated files, read one saved report or snapshot per node. Names the odd node out.",
)
@click.option("--brief", is_flag=True, help="Show only problems (hide passing checks).")
@click.option(
    "--verbose",
    "-v",
    is_flag=True,
    help="Show evidence for every check, skipped checks and probe gaps.",
)
def doctor_command(
    from_path: tuple[Path, ...],
    save_path: Path | None,
    markdown: bool,
    as_json: bool,
    explain_id: str | None,
    list_checks: bool,
    python: str | None,
    data_paths: tuple[str, ...],
    ram_ratio: float,
    min_cores_per_gpu: int,
    timeout_s: float,
    no_kernel_log: bool,
    brief: bool,
    verbose: bool,
    fleet: str | None = None,
) -> None:
    """Check drivers, CUDA, frameworks, GPUs, NCCL, memory and disks; say what to fix.

    Exit code: 0 when no check fails, 1 when one fails, 2 for bad usage or unreadable input.
    """
    if explain_id is not None:  # --explain '' is a mistake, not "no --explain"
        _explain(explain_id, as_json)
        return
    if list_checks:
        _list_checks(as_json)
        return
    if fleet is not None:
        if markdown:
            # It printed plain text under --markdown; say so rather than mislabel the output.
            raise InputError(
                "--fleet has no Markdown form", fix="use --fleet alone (text) or with --json"
            )

        # exit 1 when a node is odd (differs, fails a check others pass, or is drained/down)
        fleet_result = fleet_report.collect(fleet, timeout_s)
        print_report(fleet_result, as_json, fleet_report.render_text)
        if fleet_result.problem:
            sys.exit(1)
        return
    if as_json and markdown:
        raise InputError("--json and --markdown: choose one output format", fix="drop one of them")
    if python and from_path:
        raise InputError(
            "--python inspects this machine; it cannot be combined with --from",
            fix="drop one of them",
        )
    machine = _machine(
        from_path, python, timeout_s, data_paths, not no_kernel_log, quiet=as_json or markdown
    )
    if save_path is not None:
        write_text_atomic(save_path, machine.to_json() + "\n")
    options = doctor.DoctorOptions(
        ram_to_gpu_memory_ratio=ram_ratio,
        min_cpu_cores_per_gpu=min_cores_per_gpu,
        data_paths=tuple(data_paths),
    )
    report = doctor.run(options, machine=machine)
    if as_json:
        print_json(report.to_dict())
    elif markdown:
        sys.stdout.write(render_markdown(report))
    else:
        out = console()
        render_text(report, out, show_ok=not brief, verbose=verbose)
        if save_path is not None:
            out.print(f"snapshot saved to {save_path}", style="dim")
    if report.failed:
        sys.exit(1)


def _machine(
    from_path: tuple[Path, ...],
    python: str | None,
    timeout_s: float,
    data_paths: tuple[str, ...],
    read_kernel_log: bool,
    quiet: bool,
) -> Machine:
    for data_path in data_paths:
        if not Path(data_path).exists():
            raise InputError(
                f"--data-path {data_path}: no such directory",
                fix="give a directory that holds training data",
            )
        if not Path(data_path).is_dir():
            raise InputError(
                f"--data-path {data_path}: not a directory",
                fix="give the directory that holds the training data, not a file in it",
            )
    if from_path:
        return readers.load_many(from_path)
    if python is not None and not (Path(python).is_file() and os.access(python, os.X_OK)):
        raise InputError(
            f"--python {python}: not an executable interpreter",
            fix="give the path of a python executable, e.g. /path/to/venv/bin/python",
        )
    context = ProbeContext(
        python=python, timeout_s=timeout_s, data_paths=data_paths, read_kernel_log=read_kernel_log
    )
    err = console(stderr=True)
    if quiet or not err.is_terminal:
        machine = probe.collect(context)
    else:
        with err.status("probing this machine…") as status:
            machine = probe.collect(
                context, progress=lambda name: status.update(f"probing this machine… {name} done")
            )
    if python is not None and machine.frameworks is None:
        # The interpreter named did not run the probe: it is not a Python (/bin/ls), or a broken
        # one. Its environment was not inspected, so the report would not be about it.
        raise InputError(
            f"--python {python}: did not run as a Python interpreter",
            fix="give the path of a python executable, e.g. /path/to/venv/bin/python",
        )
    return machine


def _explain(check_id: str, as_json: bool) -> None:
    entry = doctor.get(check_id)
    if entry is None:
        ids = [c.id for c in doctor.all_checks()]
        close = difflib.get_close_matches(check_id, ids, n=3, cutoff=0.5)
        raise InputError(
            f"--explain {check_id}: no such check",
            fix=("did you mean " + ", ".join(close) + "? " if close else "")
            + "list them with: dlrig doctor --list-checks",
        )
    cause = causes.CAUSES.get(entry.cause) if entry.cause else None
    if as_json:
        print_json(
            {
                "schema": "dlrig.doctor.explain",
                "schema_version": doctor.SCHEMA_VERSION,
                "id": entry.id,
                "area": entry.area,
                "title": entry.title,
                "explanation": entry.explanation,
                "cause": entry.cause,
                "cause_title": cause.title if cause else None,
                "default_fix": cause.default_fix if cause else None,
            }
        )
        return
    out = console()
    out.print(f"[bold]{entry.id}[/bold]  ({entry.area}) — {entry.title}")
    out.print()
    out.print(entry.explanation)
    if cause:
        out.print()
        out.print(f"[bold]cause[/bold] {cause.id}: {cause.title}")
        out.print(cause.explanation)
        out.print(f"[bold]usual fix[/bold] {cause.default_fix}")


def _list_checks(as_json: bool) -> None:
    entries = doctor.all_checks()
    if as_json:
        print_json(
            {
                "schema": "dlrig.doctor.checks",
                "schema_version": doctor.SCHEMA_VERSION,
                "checks": [
                    {"id": c.id, "area": c.area, "title": c.title, "cause": c.cause}
                    for c in entries
                ],
            }
        )
        return
    out = console()
    for entry in entries:
        out.print(f"{entry.id:32} {entry.area:11} {entry.title}")

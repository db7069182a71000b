"""`dlrig diagnose`: why did my training crash, and what exactly do I change?"""

from __future__ import annotations

import dataclasses
import shlex
import signal
import sys
from pathlib import Path

import click

from dlrig import diagnose, wrap
from dlrig.cli.common import command_after_dashes, console, json_option, print_json, print_report
from dlrig.diagnose import Diagnosis
from dlrig.diagnose.render import render_text
from dlrig.errors import InputError
from dlrig.inputs import check_readable_file
from dlrig.machine import readers
from dlrig.machine.model import Machine
from dlrig.machine.probe import collect

EXIT_NO_CAUSE = 3


@click.command("diagnose")
@click.argument("inputs", nargs=-1, metavar="FILE... | - | -- CMD ARGS...")
@json_option
@click.option(
    "--machine",
    "machine_path",
    type=click.Path(path_type=Path),
    metavar="SNAPSHOT",
    help="Use this machine's facts in the fixes (a `dlrig doctor --save` snapshot, or any "
    "file `dlrig doctor --from` reads).",
)
@click.option(
    "--probe", is_flag=True, help="Probe this machine for the fixes' facts (driver, torch, GPUs)."
)
@click.option("--all", "show_all", is_flag=True, default=True, hidden=True)
def diagnose_command(
    inputs: tuple[str, ...], as_json: bool, machine_path: Path | None, probe: bool, show_all: bool
) -> None:
    """Read a crashed training log and name the root cause, the lines that prove it, and the fix.

    \b
    dlrig diagnose train.log [rank1.log ...]   one run, one or more files (gzip is fine)
    dlrig diagnose - < train.log               from stdin (a pipe is read without -)
    dlrig diagnose -- torchrun ... train.py    run the command, show its output as it runs,
                                               and diagnose if it fails

    Options go before or after the files; with `-- CMD`, everything after `--` is the command's.
    With --json and -- CMD, the command's output goes to stderr so stdout holds only the JSON.
    Where stdout is a terminal the command runs on a pseudo-terminal (colours and progress bars
    pass through unchanged); when the reader of dlrig's output goes away, the command keeps
    running and is still diagnosed.

    \b
    Exit codes: 0 a cause was found; 3 no cause found; 2 bad usage or unreadable input.
    With -- CMD: the command's own exit code (128+N when signal N killed it).
    """
    machine = _machine(machine_path, probe)
    command = command_after_dashes(
        inputs, "logs", "dlrig diagnose FILE...  or  dlrig diagnose -- CMD ARGS..."
    )
    if command is not None:
        _run_command(command, machine, as_json)
        return
    if not inputs and not sys.stdin.isatty():
        # `cat train.log | dlrig diagnose`: a pipe or a redirected file is the log.
        result = diagnose.diagnose_stream(sys.stdin.buffer, "<stdin>", machine)
        if result.bytes == 0:
            raise InputError(
                "no log given (standard input is empty)",
                fix="dlrig diagnose FILE...  (or pipe the log in, or -- CMD ARGS...)",
            )
        _report(result, as_json)
        if not result.causes:
            sys.exit(EXIT_NO_CAUSE)
        return
    if not inputs:
        raise InputError(
            "no log given", fix="dlrig diagnose FILE...  (or - for stdin, or -- CMD ARGS...)"
        )
    if inputs == ("-",):
        result = diagnose.diagnose_stream(sys.stdin.buffer, "<stdin>", machine)
    else:
        if "-" in inputs:
            raise InputError(
                "'-' (stdin) cannot be mixed with files", fix="give files or -, not both"
            )
        paths = [Path(p) for p in inputs]
        _check_logs(paths)
        result = diagnose.diagnose_paths(paths, machine)
    _report(result, as_json)
    if not result.causes:
        sys.exit(EXIT_NO_CAUSE)


def _signal_name(code: int) -> str | None:
    """SIGKILL for 137 (128 + 9): the shell's convention for a command a signal ended."""
    if code <= 128:
        return None
    try:
        return signal.Signals(code - 128).name
    except ValueError:
        return None


def _check_logs(paths: list[Path]) -> None:
    """Every log the user named must be there and hold something (exit 2, as doctor does)."""
    for path in paths:
        check_readable_file(path, "training log")
        if path.stat().st_size == 0:
            raise InputError(f"{path}: the file is empty", fix="give the log the job wrote")


def _machine(path: Path | None, probe: bool) -> Machine | None:
    if path and probe:
        raise InputError("--machine and --probe: choose one", fix="drop one of them")
    if path:
        return readers.load(path)
    if probe:
        return collect()
    return None


def _report(result: object, as_json: bool) -> None:
    assert isinstance(result, Diagnosis)
    print_report(result, as_json, render_text)


def _run_command(command: list[str], machine: Machine | None, as_json: bool) -> None:
    # One session, two inputs: stdout and stderr keep their own line numbers.
    session = diagnose.Session(machine)
    session.start("stdout")
    session.start("stderr")
    # With --json, dlrig's stdout carries the document alone: the command's own stdout goes to
    # stderr with its stderr, so `dlrig diagnose --json -- CMD > out.json` stays parseable.
    outcome = wrap.run(
        command,
        lambda data, source: session.feed(data, source),
        stdout_fd=sys.stderr.fileno() if as_json else None,
    )
    code = outcome.exit_code
    if code == 0:
        sys.exit(0)
    killed_by = _signal_name(code)
    if killed_by == "SIGKILL":
        # Killed without a word (kill -9, the OOM killer, a scheduler): the exit status is the
        # only evidence, so it goes in as a line of its own, the way a shell reports it.
        session.feed(b"\nKilled\n", "exit")
    result = dataclasses.replace(
        session.finish(), command=tuple(command), exit_code=code, signal=killed_by
    )
    try:
        if as_json:
            print_json(result.to_dict())
        else:
            out = console(stderr=True)
            out.print()
            from rich.markup import escape

            shown = escape(shlex.join(command))  # the command as it ran, brackets and all
            out.print(f"[bold]dlrig diagnose:[/bold] `{shown}` exited with {code}")
            render_text(result, out)
    except BrokenPipeError:
        pass  # nobody is reading any more; the command's exit code still goes back
    sys.exit(code)

"""`dlrig diagnose`: why did my training crash, and what exactly do I change?"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import click

from dlrig.cli.common import console, json_option, print_json
from dlrig.errors import InputError
from dlrig.machine.model import Machine

EXIT_NO_CAUSE = 3


@click.command(
    "diagnose",
    context_settings={"ignore_unknown_options": False, "allow_interspersed_args": False},
)
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
    dlrig diagnose - < train.log               from stdin
    dlrig diagnose -- torchrun ... train.py    run the command, show its output as it runs,
                                               and diagnose if it fails

    Exit code: 0 when a cause was found, 3 when none, 2 for bad input. When running a command,
    dlrig exits with the command's own exit code.
    """
    from dlrig import diagnose

    machine = _machine(machine_path, probe)
    command = _command(inputs)
    if command is not None:
        _run_command(command, machine, as_json)
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
        result = diagnose.diagnose_paths([Path(p) for p in inputs], machine)
    _report(result, as_json)
    if not result.causes:
        sys.exit(EXIT_NO_CAUSE)


def _command(inputs: tuple[str, ...]) -> list[str] | None:
    """The command after `--` (click strips the `--` itself; the raw argv tells it was there)."""
    root = click.get_current_context().find_root()
    argv: list[str] = list((root.obj or {}).get("argv", sys.argv[1:]))
    if "--" in argv and inputs:
        after = argv[argv.index("--") + 1 :]
        if after and list(inputs[-len(after) :]) == after:
            return after
    return None


def _machine(path: Path | None, probe: bool) -> Machine | None:
    if path and probe:
        raise InputError("--machine and --probe: choose one", fix="drop one of them")
    if path:
        from dlrig.machine import readers

        return readers.load(path)
    if probe:
        from dlrig.machine.probe import collect

        return collect()
    return None


def _report(result: object, as_json: bool) -> None:
    from dlrig.diagnose import Diagnosis
    from dlrig.diagnose.render import render_text

    assert isinstance(result, Diagnosis)
    if as_json:
        print_json(result.to_dict())
    else:
        render_text(result, console())


def _pump(stream: IO[bytes], out: IO[bytes], feed: object, lock: threading.Lock) -> None:
    """Copy a child's stream to ours unchanged, and into the diagnosis."""
    fd = stream.fileno()
    while True:
        data = os.read(fd, 65536)
        if not data:
            return
        out.write(data)
        out.flush()
        with lock:
            feed(data)  # type: ignore[operator]


def _run_command(command: list[str], machine: Machine | None, as_json: bool) -> None:
    from dlrig import diagnose

    try:
        child = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=None
        )
    except FileNotFoundError:
        raise InputError(
            f"{command[0]}: command not found", fix="check the command after --"
        ) from None
    except PermissionError:
        raise InputError(
            f"{command[0]}: permission denied", fix="check the command after --"
        ) from None
    # One session, two inputs: stdout and stderr keep their own line numbers.
    session = diagnose.Session(machine)
    session.start("stdout")
    session.start("stderr")
    lock = threading.Lock()

    def feeder(source: str) -> object:
        return lambda data: session.feed(data, source)

    pumps = [
        threading.Thread(
            target=_pump,
            args=(child.stdout, sys.stdout.buffer, feeder("stdout"), lock),
            daemon=True,
        ),
        threading.Thread(
            target=_pump,
            args=(child.stderr, sys.stderr.buffer, feeder("stderr"), lock),
            daemon=True,
        ),
    ]
    for pump in pumps:
        pump.start()

    def forward(signum: int, frame: object) -> None:
        child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = child.wait()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    for pump in pumps:
        pump.join()
    if code == 0:
        sys.exit(0)
    result = session.finish()
    sys.stderr.flush()
    if as_json:
        print_json(result.to_dict())
    else:
        out = console(stderr=True)
        out.print()
        out.print(f"[bold]dlrig diagnose:[/bold] `{' '.join(command)}` exited with {code}")
        from dlrig.diagnose.render import render_text

        render_text(result, out)
    sys.exit(code if code > 0 else 128 - code)

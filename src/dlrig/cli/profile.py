"""`dlrig profile`: where each training step's time goes, and the one change that wins most."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from dlrig.cli.common import (
    command_after_dashes,
    console,
    integer_option,
    json_option,
    print_json,
    print_report,
)
from dlrig.errors import InputError
from dlrig.profile import compare, live, render, report

EXIT = (
    "Exit codes: 0 the profile was made; 2 bad usage, an unreadable trace, or a command that "
    "ended before its first profiled step. With -- CMD: the command's own exit code."
)


class ProfileGroup(click.Group):
    """`dlrig profile TRACE...` and `dlrig profile -- CMD` run `steps`; `dlrig profile compare`
    the other. Options may come first (`dlrig profile --json trace.json`)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["steps", *args]
        return super().parse_args(ctx, args)


@click.group("profile", cls=ProfileGroup, epilog=EXIT)
def profile_command() -> None:
    """Where each training step's time goes (data wait, forward, backward, optimizer; on the
    GPU compute, exposed communication, copies and idle time), the top kernels, MFU, and the
    one change that wins most with its expected gain.

    \b
    dlrig profile -- python train.py ARGS    profile a few steps of a running job
    dlrig profile rank0.json.gz rank1.json.gz    read Kineto traces (stragglers named)
    dlrig profile compare before/ after/         what changed between two runs
    """


@profile_command.command("steps", epilog=EXIT)
@click.argument("inputs", nargs=-1, metavar="TRACE... | -- CMD ARGS...")
@integer_option("--steps", "steps", min=1, max=100, default=5, help="Steps to record.")
@integer_option(
    "--warmup", min=0, max=100, default=1, help="Steps the profiler runs before recording."
)
@integer_option(
    "--wait",
    min=1,
    max=1000,
    default=1,
    help="Steps after the first before the profiler warms up (the first of them is counted "
    "by FlopCounterMode for MFU).",
)
@click.option("--no-flops", is_flag=True, help="Do not count FLOPs (no MFU).")
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    metavar="DIR",
    help="Keep the traces here (trace-rankN.json.gz; trace-pidN.json.gz for a process with no "
    "rank); by default they are deleted.",
)
@json_option
def steps_command(
    inputs: tuple[str, ...],
    steps: int,
    warmup: int,
    wait: int,
    no_flops: bool,
    out: Path | None,
    as_json: bool,
) -> None:
    """Profile a job (-- CMD) or read its Kineto traces (one per rank), and report per step
    where the time went and the change that wins most.

    With -- CMD, every Python process the command starts (torchrun's workers too) runs under
    torch.profiler from its second optimizer step: --wait steps unrecorded, --warmup steps,
    then --steps recorded; one trace per rank. Nothing in the program changes; outside those
    steps the cost is one Python call per optimizer step. With --json and -- CMD the
    command's output goes to stderr, so stdout holds only the JSON.

    \b
    Example:
      dlrig profile -- python train.py --epochs 1
      dlrig profile --steps 10 --out prof/ -- torchrun --nproc-per-node 8 train.py
      dlrig profile prof/trace-rank0.json.gz prof/trace-rank1.json.gz --json
    """
    command = command_after_dashes(
        inputs, "traces", "dlrig profile TRACE...  or  dlrig profile -- CMD ARGS..."
    )
    if command is not None:
        options = live.Options(steps=steps, warmup=warmup, wait=wait, flops=not no_flops)
        result, code = live.run(
            command, options, out, stdout_fd=sys.stderr.fileno() if as_json else None
        )
        if as_json:
            print_json(result.to_dict())
        else:
            out_console = console()
            out_console.print()
            render.render_text(result, out_console)
            if out is not None:
                out_console.print(f"traces kept in {out}/")
        sys.exit(code)
    if not inputs:
        raise InputError(
            "no trace or command given",
            fix="dlrig profile TRACE.json.gz ...  or  dlrig profile -- python train.py",
        )
    if out is not None:
        raise InputError("--out is for -- CMD (traces given are read in place)", fix="drop --out")
    print_report(report.analyse(list(inputs)), as_json, render.render_text)


@profile_command.command("compare", epilog="Exit codes: 0 compared; 2 bad usage or input.")
@click.argument("a", metavar="A")
@click.argument("b", metavar="B")
@json_option
def compare_command(a: str, b: str, as_json: bool) -> None:
    """What changed from run A to run B: the step, each phase, each GPU part, and the kernels
    that moved most. A and B are traces, folders `--out` wrote, or `--json` documents.

    \b
    Example:
      dlrig profile compare before.json after.json
      dlrig profile compare prof-workers0/ prof-workers8/ --json
    """
    comparison = compare.compare(compare.load_document(a), compare.load_document(b), a, b)
    print_report(comparison, as_json, compare.render_text)

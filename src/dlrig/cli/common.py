"""What every command shares: option declarations, the console, JSON printing."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from dlrig.errors import InputError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    D = TypeVar("D", bound=DataclassInstance)

F = TypeVar("F", bound=Callable[..., Any])


def json_option(function: F) -> F:
    """--json: print a stable, versioned JSON document instead of the readable report."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print a JSON document (with schema_version) instead of text.",
    )(function)


def out_option(
    help: str, metavar: str = "DIR", dest: str = "out", type: Any = None
) -> Callable[[F], F]:
    """--out: where output goes, a folder when the command writes several files, a file when
    it writes one (docs/conventions.md)."""
    return click.option("--out", dest, type=type, metavar=metavar, help=help)


def choice_option(
    *decls: str, choices: Sequence[str], help: str | None = None, **attrs: Any
) -> Callable[[F], F]:
    """An option that takes one of `choices`; --help lists them and shows the default, where
    there is one (`attrs` are click.option's: default, flag_value, ...)."""
    return click.option(*decls, type=click.Choice(choices), show_default=True, help=help, **attrs)


def number_option(
    *decls: str,
    min: float | None = None,
    max: float | None = None,
    min_open: bool = False,
    help: str | None = None,
    **attrs: Any,
) -> Callable[[F], F]:
    """An option that takes a real number within bounds (see FiniteFloat); --help shows the
    default, where there is one."""
    return click.option(
        *decls, type=FiniteFloat(min, max, min_open), show_default=True, help=help, **attrs
    )


def integer_option(
    *decls: str,
    min: int | None = None,
    max: int | None = None,
    help: str | None = None,
    **attrs: Any,
) -> Callable[[F], F]:
    """An option that takes a whole number within bounds (click.IntRange, which --help states);
    --help shows the default, where there is one."""
    return click.option(
        *decls, type=click.IntRange(min, max), show_default=True, help=help, **attrs
    )


def options_from(options_type: type[D], params: dict[str, Any], /, **given: Any) -> D:
    """An `options_type` (the API's options dataclass) from a command's click params: each
    param named as one of its fields is taken out of `params`; `given` are the fields the
    command worked out itself (a renamed or negated flag). What stays in `params` is the
    command's own business (output options, facts)."""
    import dataclasses

    names = [f.name for f in dataclasses.fields(options_type) if f.name in params]
    return options_type(**{name: params.pop(name) for name in names}, **given)


def print_json(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")


def print_report(
    report: Any, as_json: bool, render: Callable[[Any, Any], object], wide: bool = False
) -> None:
    """How a command hands back its report: with --json the report's stable document (its
    `to_dict`), else the readable text `render(report, console)` draws (on the wide console
    where the report is tables)."""
    if as_json:
        print_json(report.to_dict())
    else:
        render(report, console_wide() if wide else console())


def console(stderr: bool = False) -> Any:
    """A rich console; colours only on terminals, plain text in pipes."""
    from rich.console import Console

    probe = Console(stderr=stderr)
    # In pipes and files keep lines whole: a wrapped fix command cannot be pasted.
    return Console(stderr=stderr, highlight=False, soft_wrap=not probe.is_terminal)


def console_wide() -> Any:
    """The console; in files and pipes wide enough that table rows are never cut (unless
    COLUMNS says how wide)."""
    out = console()
    if not out.is_terminal and not os.environ.get("COLUMNS"):
        out.width = max(out.width, 150)
    return out


@contextlib.contextmanager
def progress_bar(start: str, quiet: bool = False) -> Iterator[Callable[[str, float], None]]:
    """Progress of long work that calls `progress(label, fraction_done)`. On a terminal, a bar
    on stderr with the time elapsed and an estimate of what is left, gone when the work ends.
    Off one (a pipe, a log, CI), one line on stderr per stage (the label's first word) and per
    tenth of the work, so a log shows where the time went without a line per step."""
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    err = console(stderr=True)
    if quiet or not err.is_terminal:
        with progress_lines(quiet) as progress:
            yield progress
        return
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task(start, total=1.0)

        def progress(label: str, fraction: float) -> None:
            bar.update(task, description=label, completed=fraction)

        yield progress


@contextlib.contextmanager
def progress_lines(quiet: bool) -> Iterator[Callable[[str, float], None]]:
    import time

    started = time.monotonic()
    last: dict[str, Any] = {"stage": None, "tenth": -1}

    def progress(label: str, fraction: float) -> None:
        if quiet:
            return
        stage = label.split()[0] if label.split() else label
        tenth = int(min(max(fraction, 0.0), 1.0) * 10)
        elapsed = time.monotonic() - started
        # Work that ends (or fails) within a second needs no log of its progress.
        if elapsed < 1.0 or (stage == last["stage"] and tenth == last["tenth"]):
            return
        last["stage"], last["tenth"] = stage, tenth
        left = ""
        if 0.05 <= fraction < 1.0:
            left = f", about {elapsed * (1 - fraction) / fraction:.0f} s left"
        sys.stderr.write(f"dlrig: {fraction:4.0%} {label} ({elapsed:.0f} s{left})\n")
        sys.stderr.flush()

    yield progress


class FiniteFloat(click.ParamType):  # type: ignore[type-arg]  # generic only in click >= 8.5
    """A float that is a real number within bounds.

    click's FloatRange lets NaN and infinity through (NaN compares false with every bound), so a
    `--duration nan` or `--price-per-kwh inf` would run and print nonsense. This refuses them."""

    name = "number"

    def __init__(
        self,
        min: float | None = None,
        max: float | None = None,
        min_open: bool = False,
    ) -> None:
        self.min, self.max, self.min_open = min, max, min_open

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        import math

        if isinstance(value, float) and math.isfinite(value):
            number = value
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                self.fail(f"{value!r} is not a number", param, ctx)
            if not math.isfinite(number):
                self.fail(f"{value!r} is not a finite number", param, ctx)
        if self.min is not None and (number < self.min or (self.min_open and number == self.min)):
            bound = f"above {self.min:g}" if self.min_open else f"at least {self.min:g}"
            self.fail(f"{value!r} is out of range: give a number {bound}", param, ctx)
        if self.max is not None and number > self.max:
            self.fail(f"{value!r} is out of range: give at most {self.max:g}", param, ctx)
        return number


def command_after_dashes(inputs: tuple[str, ...], files: str, usage: str) -> list[str] | None:
    """The command after `--` in `dlrig CMD ... -- PROGRAM ARGS` (click strips the `--`; the
    raw argv says it was there), or None. `files` names what else the command takes ("logs",
    "traces"), `usage` its two forms, for the error when both are given."""
    root = click.get_current_context().find_root()
    argv: list[str] = list((root.obj or {}).get("argv", sys.argv[1:]))
    if "--" in argv and inputs:
        after = argv[argv.index("--") + 1 :]
        if after and list(inputs[-len(after) :]) == after:
            if len(inputs) > len(after):
                raise InputError(
                    f"{inputs[0]}: {files} and a command to run cannot be mixed", fix=usage
                )
            return after
    return None

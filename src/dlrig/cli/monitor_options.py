"""The options `dlrig monitor` and its subcommands share: where readings come from, which GPUs.

They can be given to the group or to the subcommand (`dlrig monitor --replay F serve` and
`dlrig monitor serve --replay F` mean the same): a subcommand's own value wins, the group's
fills in what the subcommand was not told, and repeatable options (--replay, --gpu-index) add up.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click
from click.core import ParameterSource

from dlrig import monitor
from dlrig.cli.common import F, integer_option, number_option
from dlrig.cli.common import out_option as common_out_option
from dlrig.errors import InputError

SOURCE_OPTIONS = ("replay", "replay_state", "frame_seconds", "replicate", "interval", "gpu_index")
GROUP_VALUES = "dlrig.monitor.group"


@dataclass(frozen=True)
class SourceSettings:
    replay: tuple[str, ...]
    replay_state: str | None
    frame_seconds: float
    replicate: int | None
    interval: float
    gpu_index: tuple[int, ...]

    def open(self) -> Any:
        """The source these settings name (a replay, else this machine's GPUs)."""
        if not 0.05 <= self.interval <= 3600:
            raise InputError(
                f"--interval {self.interval} is out of range",
                fix="give seconds between 0.05 and 3600",
            )
        return monitor.open_source(
            self.replay, self.replay_state, self.frame_seconds, self.replicate
        )

    @property
    def host(self) -> bool:
        """Sample this host too: yes for live GPUs, not beside a recording of another machine."""
        return not self.replay

    def sampling(self) -> dict[str, Any]:
        """The Sampler's keywords these settings give (the live view, serve and record)."""
        return {
            "interval_seconds": self.interval,
            "host": self.host,
            "gpu_indices": self.gpu_index,
        }


def source_options(function: F) -> F:
    """Where readings come from (NVML, nvidia-smi or recorded files) and which GPUs."""
    options = [
        click.option(
            "--replay",
            "replay",
            multiple=True,
            metavar="FILE",
            help="Replay recorded nvidia-smi output (-q -x XML, --query-gpu CSV, -q text, a "
            "capture from `monitor record --out`, a kernel log for Xid events). Repeatable.",
        ),
        click.option(
            "--replay-state", help="Replay only this state of a capture (e.g. idle, load)."
        ),
        number_option(
            "--frame-seconds",
            min=0,
            min_open=True,
            default=30.0,
            help="Seconds each replayed state/file is shown before the next.",
        ),
        click.option(
            "--replicate",
            type=int,
            help="Replay each recorded GPU N times (to try an N-GPU setup with a 1-GPU file).",
        ),
        number_option(
            "--interval", min=0.05, max=3600, default=1.0, help="Seconds between samples."
        ),
        integer_option(
            "--gpu-index",
            "gpu_index",
            min=0,
            multiple=True,
            metavar="N",
            help="Only this GPU (NVML's index; a replay's in file order). Repeatable.",
        ),
    ]
    for option in reversed(options):
        function = option(function)
    return function


def remember_group_values(ctx: click.Context, values: dict[str, Any]) -> None:
    """The group's own options, for the subcommand to take what it was not told itself."""
    given = {
        name: value
        for name, value in values.items()
        if ctx.get_parameter_source(name) is not ParameterSource.DEFAULT
    }
    ctx.meta[GROUP_VALUES] = given


def merged(ctx: click.Context, values: dict[str, Any]) -> dict[str, Any]:
    """A subcommand's option values with the group's filled in (see the module docstring)."""
    group = ctx.meta.get(GROUP_VALUES, {})
    result = dict(values)
    for name, value in group.items():
        if name not in result:
            continue
        mine = ctx.get_parameter_source(name) is not ParameterSource.DEFAULT
        if isinstance(value, tuple):
            result[name] = tuple(value) + tuple(result[name] if mine else ())
        elif not mine:
            result[name] = value
    return result


def source_settings(ctx: click.Context, values: dict[str, Any]) -> SourceSettings:
    combined = merged(ctx, {name: values[name] for name in SOURCE_OPTIONS})
    return SourceSettings(**combined)


def duration_option(function: F) -> F:
    """--duration SECONDS for the commands that otherwise run until stopped (serve, record)."""
    return number_option(
        "--duration", min=0, min_open=True, help="Stop after this many seconds (default: run)."
    )(function)


def out_option(help_text: str, legacy: str) -> Callable[[F], F]:
    """--out PATH, with the option's old spelling kept working but hidden from --help."""

    def decorate(function: F) -> F:
        function = click.option(
            legacy, "legacy_out", hidden=True, help=f"Old spelling of --out ({legacy})."
        )(function)
        return common_out_option(help_text, metavar="PATH")(function)

    return decorate


def out_path(out: str | None, legacy_out: str | None, legacy: str) -> str | None:
    if out and legacy_out and out != legacy_out:
        raise InputError(
            f"--out {out} and {legacy} {legacy_out} name two places",
            fix=f"give --out only ({legacy} is its old spelling)",
        )
    return out or legacy_out

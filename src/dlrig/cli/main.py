"""The `dlrig` command: subcommands, and the one place that turns errors into exit codes."""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from typing import Any

import click

from dlrig import __version__, lifecycle
from dlrig.cli import examples
from dlrig.errors import DlrigError

# name -> "module:attribute". Each command module is imported only when it runs (or for
# `--help`), so `dlrig doctor` never pays for the imports of `fit` or `monitor`.
COMMANDS: dict[str, str] = {
    "doctor": "dlrig.cli.doctor:doctor_command",
    "diagnose": "dlrig.cli.diagnose:diagnose_command",
    "fit": "dlrig.cli.fit:fit_command",
    "monitor": "dlrig.cli.monitor:monitor_command",
    "bench": "dlrig.cli.bench:bench_command",
    "provision": "dlrig.cli.provision:provision_command",
    "train": "dlrig.cli.train:train_command",
    "pack": "dlrig.cli.pack:pack_command",
    "plan": "dlrig.cli.plan:plan_command",
    "accept": "dlrig.cli.accept:accept_command",
    "report": "dlrig.cli.report:report_command",
    "health": "dlrig.cli.health:health_command",
    "profile": "dlrig.cli.profile:profile_command",
}


def _available(target: str) -> bool:
    return importlib.util.find_spec(target.partition(":")[0]) is not None


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, target in COMMANDS.items() if _available(target)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None or not _available(target):
            return None
        module_name, _, attribute = target.partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        assert isinstance(command, click.Command)
        examples.attach(command, cmd_name)
        return command


@click.group(
    "dlrig",
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="Exit codes: 0 ok; 1 a problem was found; 2 bad usage or unreadable input; "
    "3 `diagnose` found no cause; 130/143/129 stopped by SIGINT/SIGTERM/SIGHUP; 70 a bug in "
    "dlrig. Each command's --help says what its own codes mean.",
)
@click.version_option(__version__, prog_name="dlrig")
def cli() -> None:
    """dlrig: take a deep-learning server from purchase to production and keep it healthy."""


examples.attach(cli)


def main(argv: list[str] | None = None) -> None:
    """Entry point: library errors become one clean line and an exit code, never a traceback."""
    lifecycle.install()
    try:
        raw = list(argv) if argv is not None else sys.argv[1:]
        obj: dict[str, Any] = {"argv": raw}
        cli.main(args=raw, prog_name="dlrig", standalone_mode=False, obj=obj)
    except lifecycle.Stopped as stop:
        _quiet_stdout()
        sys.stderr.write(f"dlrig: stopped by {stop.name}\n")
        sys.exit(stop.exit_code)
    except click.exceptions.Abort:
        sys.stderr.write("dlrig: interrupted\n")
        sys.exit(130)
    except click.UsageError as exc:
        # Usage errors in dlrig's one-line form (click prints three: Usage / Try / Error).
        path = exc.ctx.command_path if exc.ctx is not None else "dlrig"
        if path == "dlrig" and raw and raw[0] in COMMANDS:
            path = f"dlrig {raw[0]}"  # raised before click made the command's context
        message = " ".join(exc.format_message().split())
        sys.stderr.write(f"{path}: error: {message} — fix: see {path} --help\n")
        sys.exit(2)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except DlrigError as exc:
        sys.stderr.write(f"dlrig: error: {exc.one_line()}\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("dlrig: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        # `dlrig doctor | head`: the reader went away; not an error worth a traceback.
        _quiet_stdout()
        sys.exit(0)
    except SystemExit:
        raise
    except Exception as exc:
        if os.environ.get("DLRIG_DEBUG"):
            raise
        sys.stderr.write(
            f"dlrig: internal error: {type(exc).__name__}: {exc}\n"
            "This is a bug in dlrig. Rerun with DLRIG_DEBUG=1 for the traceback and report it.\n"
        )
        sys.exit(70)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail on a closed pipe."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()

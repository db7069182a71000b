"""The `dlrig` command: subcommands, and the one place that turns errors into exit codes."""

from __future__ import annotations

import os
import sys

import click

from dlrig import __version__
from dlrig.cli.bench import bench_command
from dlrig.cli.diagnose import diagnose_command
from dlrig.cli.doctor import doctor_command
from dlrig.cli.fit import fit_command
from dlrig.cli.monitor import monitor_command
from dlrig.errors import DlrigError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="dlrig")
def cli() -> None:
    """dlrig: take a deep-learning server from purchase to production and keep it healthy."""


cli.add_command(doctor_command)
cli.add_command(diagnose_command)
cli.add_command(fit_command)
cli.add_command(monitor_command)
cli.add_command(bench_command)


def main(argv: list[str] | None = None) -> None:
    """Entry point: library errors become one clean line and an exit code, never a traceback."""
    try:
        raw = list(argv) if argv is not None else sys.argv[1:]
        cli.main(args=raw, prog_name="dlrig", standalone_mode=False, obj={"argv": raw})
    except click.exceptions.Abort:
        sys.stderr.write("dlrig: interrupted\n")
        sys.exit(130)
    except click.ClickException as exc:
        # Usage errors: click's own one-line message, exit 2.
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
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
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


if __name__ == "__main__":
    main()

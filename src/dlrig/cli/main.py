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

# What `dlrig --help` lists for each command: its help's first sentence, kept here so the list
# needs no command module imported (tests/cli keep each equal to the command's own).
SUMMARIES: dict[str, str] = {
    "doctor": "Check drivers, CUDA, frameworks, GPUs, NCCL, memory and disks; say what to fix.",
    "diagnose": "Read a crashed training log and name the root cause, the lines that prove it, and the fix.",
    "fit": "Estimate peak GPU memory, the largest batch, step time and time to train — without a GPU.",
    "monitor": "Live view of the GPUs and the host, with a one-line reading of what it means.",
    "bench": "Measure PARTS (compute, memory, comms, storage, dataloader; default: all) against what they should do, with the fix when one falls short.",
    "provision": "Generate the files that set a GPU machine up: install script, Python environment, Dockerfile, nccl.conf, launch scripts and jobs, power settings, monitoring manifests.",
    "train": "Run a training script that uses dlrig.train and report its summary.",
    "pack": "Pack a dataset of many small files into large shards (`dlrig pack SRC DST`), check one (`dlrig pack verify DST`), or measure it against its loose files (`dlrig pack bench DST`).",
    "plan": "From workloads and a budget to the server to buy (or rent), every rule checked.",
    "accept": "Prove a new or repaired server: doctor, then every bench part, then a burn-in with load on every GPU, the CPU, memory and the disk while the monitor records; verdicts with their evidence and fixes.",
    "report": "Render FILES (the JSON of accept, doctor, bench, fit, monitor report, a doctor --save snapshot, or a monitor --db history) into one HTML page: the summary first, charts of measured against expected, the burn-in's time series and the machine's facts.",
    "health": "Judge whether this node may get jobs: hardware Xids, uncorrectable ECC, pending page retirement or row remapping, a GPU missing from the bus, a driver/library mismatch, a PCIe link below its width; after a job (epilog) also processes and memory left on the GPUs.",
    "profile": "Where each training step's time goes (data wait, forward, backward, optimizer; on the GPU compute, exposed communication, copies and idle time), the top kernels, MFU, and the one change that wins most with its expected gain.",
}


def _available(target: str) -> bool:
    return importlib.util.find_spec(target.partition(":")[0]) is not None


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, target in COMMANDS.items() if _available(target)]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of `dlrig --help`, as click writes it, from SUMMARIES."""
        names = self.list_commands(ctx)
        if names:
            limit = formatter.width - 6 - max(len(name) for name in names)
            # click's own shortening, on a stand-in that has only the summary
            rows = [
                (name, click.Command(name, help=SUMMARIES[name]).get_short_help_str(limit))
                for name in names
            ]
            with formatter.section("Commands"):
                formatter.write_dl(rows)

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

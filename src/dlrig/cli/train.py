"""`dlrig train`: launch a training script that uses `dlrig.train`, locally or on N processes.

    dlrig train -- python train.py --lr 3e-4        run the command as it is
    dlrig train train.py --lr 3e-4                  the same, with this Python
    dlrig train --gpus 8 train.py --lr 3e-4         torchrun --standalone --nproc-per-node 8

dlrig's own options may come before or after the script; every other word goes to the script,
and everything after `--` goes to the command untouched. The command's stdout and stderr pass
through (with `--json`, its stdout goes to stderr so stdout holds only the JSON document), and
dlrig exits with the command's own exit code.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from dlrig import lifecycle
from dlrig.cli.common import json_option, print_json
from dlrig.errors import InputError
from dlrig.report import envelope

SCHEMA = "dlrig.train"
SCHEMA_VERSION = 1


def _split_argv(args: tuple[str, ...]) -> list[str]:
    """The command: the words click left (script and its options), then all after `--`."""
    root = click.get_current_context().find_root()
    argv: list[str] = list((root.obj or {}).get("argv", sys.argv[1:]))
    if "--" not in argv:
        return list(args)
    after = argv[argv.index("--") + 1 :]
    before = list(args[: len(args) - len(after)]) if after else list(args)
    return before + after


def build_command(words: list[str], gpus: int | None, python: str) -> list[str]:
    """The process to start: torchrun for --gpus, the script under this Python, or as given."""
    if not words:
        raise InputError(
            "no training command given",
            fix="dlrig train train.py ARGS  (or --gpus N train.py, or -- CMD ARGS)",
        )
    if gpus is not None:
        if gpus < 1:
            raise InputError(f"--gpus {gpus} is not positive", fix="give --gpus 1 or more")
        nodes = os.environ.get("SLURM_NNODES") or os.environ.get("SLURM_JOB_NUM_NODES")
        if nodes and nodes.isdigit() and int(nodes) > 1:
            # torchrun --standalone on each node would start that many separate runs.
            raise InputError(
                f"--gpus inside a Slurm job of {nodes} nodes starts one separate run per node",
                fix="launch with the sbatch `dlrig provision launch SCRIPT --scheduler slurm "
                f"--nodes {nodes}` writes (srun, torchrun with a rendezvous on the head node)",
            )
        target = words
        if Path(words[0]).name.startswith("python") and len(words) > 1:
            target = words[1:]  # `--gpus 2 -- python train.py`: torchrun runs Python itself
        return [
            python,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={gpus}",
            *target,
        ]
    if words[0].endswith(".py"):
        return [python, *words]
    return words


@click.command(
    "train",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True},
    epilog="Exit codes: the training command's own exit code (0 when it finished); 2 when "
    "the command cannot be started or the options are wrong; 128+N when it was killed by "
    "signal N (143 for SIGTERM).",
)
@click.argument("args", nargs=-1, type=click.UNPROCESSED, metavar="[SCRIPT ARGS | -- CMD ARGS]")
@click.option(
    "--gpus",
    type=int,
    default=None,
    metavar="N",
    help="Start N processes with torchrun (one per GPU; gloo processes on a CPU-only machine).",
)
@click.option(
    "--python",
    "python",
    default=sys.executable,
    show_default="this Python",
    help="The Python that runs the script.",
)
@json_option
def train_command(args: tuple[str, ...], gpus: int | None, python: str, as_json: bool) -> None:
    """Run a training script that uses dlrig.train and report its summary.

    \b
    dlrig train -- python train.py ARGS
    dlrig train train.py ARGS
    dlrig train --gpus N train.py ARGS
    """
    command = build_command(_split_argv(args), gpus, python)
    with tempfile.TemporaryDirectory(prefix="dlrig-train-") as folder:
        summary_path = Path(folder) / "summary.json"
        env = dict(os.environ)
        env["DLRIG_TRAIN_SUMMARY"] = str(summary_path)
        code = _run(command, env, as_json)
        summary = _read_summary(summary_path)
    if as_json:
        print_json(
            envelope(
                SCHEMA,
                SCHEMA_VERSION,
                {"command": command, "exit_code": code, "summary": summary},
            )
        )
    sys.exit(code)


def _run(command: list[str], env: dict[str, str], as_json: bool) -> int:
    try:
        child = subprocess.Popen(
            command, env=env, stdout=sys.stderr.fileno() if as_json else None, stdin=None
        )
    except FileNotFoundError:
        raise InputError(f"{command[0]}: command not found", fix="check the command") from None
    except PermissionError:
        raise InputError(f"{command[0]}: permission denied", fix="check the command") from None

    def forward(signum: int) -> None:
        # The child saves its checkpoint on SIGTERM (save_on_sigterm) and exits by itself.
        child.send_signal(signum)

    with lifecycle.handling(forward):
        code = child.wait()
    return code if code >= 0 else 128 - code


def _read_summary(path: Path) -> dict[str, Any] | None:
    import json

    if not path.is_file():
        return None
    try:
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None

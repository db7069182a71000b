"""`dlrig train`: launch a training script that uses `dlrig.train`, locally or on N processes.

    dlrig train -- python train.py --lr 3e-4        run the command as it is
    dlrig train train.py --lr 3e-4                  the same, with this Python
    dlrig train --gpus 8 train.py --lr 3e-4         torchrun --standalone --nproc-per-node 8

dlrig's own options may come before or after the script; every other word goes to the script,
and everything after `--` goes to the command untouched. The command's stdout and stderr pass
through (with `--json`, its stdout goes to stderr so stdout holds only the JSON document), and
dlrig exits with the command's own exit code.

The command is dlrig's child and never outlives it: the kernel sends it SIGTERM if dlrig dies,
even by SIGKILL (PR_SET_PDEATHSIG), so a `dlrig.train` script with `save_on_sigterm` still
writes its checkpoint. Stop signals sent to dlrig are forwarded, except those the terminal sent
to the whole foreground group (a Ctrl-C): the child has them already, and a second copy would
cut its checkpoint short. The run's summary comes back through an in-memory file
(memfd), so a killed dlrig leaves nothing in /tmp.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from dlrig import wrap
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


def check_command(command: list[str]) -> None:
    """The script or program exists and can run, or one line naming it (before anything starts).

    A script is the first `.py` word of `python X.py`, `torchrun X.py` or `-m
    torch.distributed.run ... X.py`; a program is the first word otherwise."""
    script = _script_of(command)
    if script is not None:
        _check_script(script)
        return
    program = command[0]
    path = Path(program)
    if path.is_dir():
        raise InputError(
            f"{program}: is a directory, not a training script or a program",
            fix=f"name the script in it, e.g. dlrig train {path / 'train.py'}",
        )
    if os.sep not in program:
        if shutil.which(program) is None:
            raise InputError(
                f"{program}: command not found (not in PATH)",
                fix="install it, or give its path; a Python script is run as dlrig train SCRIPT.py",
            )
        return
    if not path.exists():
        raise InputError(f"{program}: no such file", fix="check the path of the program")
    if not os.access(path, os.X_OK):
        raise InputError(
            f"{program}: not executable",
            fix=f"chmod +x {program}, or name its interpreter: dlrig train -- bash {program}",
        )


def _script_of(command: list[str]) -> str | None:
    if command[0].endswith(".py"):
        return command[0]
    name = Path(command[0]).name
    if not (name.startswith("python") or name == "torchrun"):
        return None
    for word in command[1:]:
        if word == "-m" or word == "-c":
            if "torch.distributed.run" not in command:
                return None  # a module or a one-liner: Python itself reports on it
            continue
        if word.endswith(".py") and not word.startswith("-"):
            return word
    return None


def _check_script(script: str) -> None:
    path = Path(script)
    if path.is_dir():
        raise InputError(
            f"{script}: is a directory, not a training script",
            fix=f"name the script in it, e.g. dlrig train {path / 'train.py'}",
        )
    if not path.exists():
        raise InputError(
            f"{script}: no such file",
            fix=f"check the path of the training script (relative to {Path.cwd()})",
        )
    if not os.access(path, os.R_OK):
        raise InputError(f"{script}: permission denied", fix="make the script readable")


@click.command(
    "train",
    context_settings={"ignore_unknown_options": True, "allow_interspersed_args": True},
    epilog="Exit codes: the training command's own exit code (0 when it finished); 2 when "
    "the command cannot be started or the options are wrong; 128+N when it was stopped by "
    "signal N (143 for SIGTERM, 130 for SIGINT: a dlrig.train script with save_on_sigterm "
    "writes its checkpoint first).",
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
    metavar="PATH",
    show_default="this Python",
    help="The Python that runs the script (and torchrun, with --gpus).",
)
@click.option(
    "--profile-steps",
    type=click.IntRange(min=1, max=100),
    default=None,
    metavar="N",
    help="Profile N steps of the run (dlrig.profile) and say where their time went.",
)
@json_option
def train_command(
    args: tuple[str, ...], gpus: int | None, python: str, profile_steps: int | None, as_json: bool
) -> None:
    """Run a training script that uses dlrig.train and report its summary.

    \b
    dlrig train -- python train.py ARGS
    dlrig train train.py ARGS
    dlrig train --gpus N train.py ARGS
    """
    command = build_command(_split_argv(args), gpus, python)
    check_command(command)
    with _summary_channel() as (target, read):
        env = dict(os.environ)
        env["DLRIG_TRAIN_SUMMARY"] = target
        if profile_steps is not None:
            env["DLRIG_TRAIN_PROFILE_STEPS"] = str(profile_steps)
        code = wrap.supervise(command, env, sys.stderr.fileno() if as_json else None)
        summary = read()
    if as_json:
        print_json(
            envelope(
                SCHEMA,
                SCHEMA_VERSION,
                {"command": command, "exit_code": code, "summary": summary},
            )
        )
    sys.exit(code)


@contextlib.contextmanager
def _summary_channel() -> Iterator[tuple[str, Callable[[], dict[str, Any] | None]]]:
    """Where the run writes its summary, and how to read it back once the child has ended.

    An in-memory file (memfd) named to the child as /proc/PID/fd/N: it goes away with dlrig
    however dlrig ends, kill -9 included. Without memfd, a temporary folder."""
    fd: int | None = None
    with contextlib.suppress(AttributeError, OSError):
        # The name dlrig.train checks before writing (summary.LAUNCHER_CHANNEL).
        fd = os.memfd_create("dlrig-train-summary", os.MFD_CLOEXEC)
    if fd is not None and os.path.exists(f"/proc/{os.getpid()}/fd/{fd}"):
        try:
            yield f"/proc/{os.getpid()}/fd/{fd}", lambda: _parse_summary(_read_fd(fd))
        finally:
            os.close(fd)
        return
    if fd is not None:
        os.close(fd)
    with tempfile.TemporaryDirectory(prefix="dlrig-train-") as folder:
        path = Path(folder) / "summary.json"
        yield str(path), lambda: _parse_summary(_read_path(path))


def _read_fd(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _read_path(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


def _parse_summary(data: bytes) -> dict[str, Any] | None:
    import json

    if not data:
        return None
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None  # the child was stopped while writing it
    return document if isinstance(document, dict) else None

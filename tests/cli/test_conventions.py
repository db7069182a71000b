"""One vocabulary across commands (docs/conventions.md), checked on the real console script.

- every command (and subcommand) documents its exit codes in --help;
- the same flag means the same thing everywhere: `--gpu` is a catalogue MODEL, `--gpu-index`
  a GPU of this machine, `--out` the output location;
- every --json document starts with `schema` and `schema_version`;
- the documented examples work with options before and after the positional arguments, and
  give the same document both ways;
- an input the user named that cannot be read is exit 2 with one line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

from dlrig.cli.main import COMMANDS, SUMMARIES, cli
from tests.conftest import CORPUS, NVSMI, ROOT

T4 = str(NVSMI / "tesla-t4-2procs-q-x.xml")
H200 = str(NVSMI / "h200-capture-idle-load.txt")


def _commands() -> list[tuple[str, click.Command]]:
    """Every command and subcommand, by its full name."""
    found = []
    context = click.Context(cli)

    def walk(prefix: str, command: click.Command) -> None:
        found.append((prefix, command))
        if isinstance(command, click.Group):
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                if sub is not None and not sub.hidden:
                    walk(f"{prefix} {name}", sub)

    for name in cli.list_commands(context):
        command = cli.get_command(context, name)
        assert command is not None
        walk(name, command)
    return found


def test_every_registered_command_exists():
    context = click.Context(cli)
    assert cli.list_commands(context) == list(COMMANDS)


@pytest.mark.parametrize(("name", "command"), _commands(), ids=lambda v: str(v))
def test_help_documents_the_exit_codes(name, command):
    context = click.Context(command, info_name=name)
    text = command.get_help(context)
    assert "Exit code" in text, f"`dlrig {name} --help` does not say what its exit codes mean"


@pytest.mark.parametrize(("name", "command"), _commands(), ids=lambda v: str(v))
def test_shared_flags_mean_the_same_everywhere(name, command):
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        if "--gpu" in param.opts:
            # A model from the catalogue: text, never a local index.
            assert not isinstance(param.type, click.types.IntParamType), name
        if "--gpu-index" in param.opts:
            assert isinstance(param.type, click.types.IntParamType), name
        for banned in ("--plots", "--to", "--output", "--output-dir", "--dir"):
            if banned in param.opts:
                assert param.hidden, f"dlrig {name} {banned}: the output option is --out"


def _run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dlrig.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def _examples(tmp: Path) -> list[tuple[list[str], list[str]]]:
    """(options first, options last) pairs of documented examples that are cheap here."""
    log = CORPUS / "logs"
    first_log = str(sorted(p for p in log.rglob("*.log") if p.stat().st_size)[0])
    return [
        (["doctor", "--json", "--from", T4], ["doctor", "--from", T4, "--json"]),
        (["diagnose", "--json", first_log], ["diagnose", first_log, "--json"]),
        (
            ["monitor", "--once", "--json", "--replay", H200],
            ["monitor", "--replay", H200, "--once", "--json"],
        ),
        (
            ["profile", "--json", str(CORPUS / "kineto" / "hta-nccl_data.json.gz")],
            ["profile", str(CORPUS / "kineto" / "hta-nccl_data.json.gz"), "--json"],
        ),
        (
            ["fit", "--json", "--gpu", "a100-sxm4-80gb", "--analytic", "llama3-8b"],
            ["fit", "llama3-8b", "--gpu", "a100-sxm4-80gb", "--analytic", "--json"],
        ),
    ]


def test_documented_examples_take_options_before_or_after_arguments(tmp_path):
    for before, after in _examples(tmp_path):
        first, second = _run(*before), _run(*after)
        assert first.returncode == second.returncode, (before, first.stderr, second.stderr)
        assert first.returncode in (0, 1, 3), (before, first.stderr)
        a, b = json.loads(first.stdout), json.loads(second.stdout)
        assert list(a)[:2] == ["schema", "schema_version"], before
        assert a["schema"] == b["schema"] and a.keys() == b.keys(), before


@pytest.mark.parametrize(
    "args",
    [
        ["doctor", "--from", "/nonexistent/box.json"],
        ["doctor", "--python", "/etc/passwd"],
        ["doctor", "--data-path", "/nonexistent/data"],
        ["diagnose", "/nonexistent/train.log"],
        ["monitor", "--once", "--replay", "/nonexistent/capture.txt"],
        ["bench", "storage", "--path", "/nonexistent/data"],
        ["profile", "/nonexistent/trace.json.gz"],
        ["profile", "compare", "/nonexistent/a.json", "/nonexistent/b.json"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_named_input_that_cannot_be_read_is_exit_2_with_one_line(args):
    done = _run(*args)
    assert done.returncode == 2, (args, done.stdout[-500:], done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr


def test_the_command_list_of_dlrig_help_is_each_commands_own_summary():
    # `dlrig --help` lists SUMMARIES without importing the command modules; each must stay
    # what the command's own help says first.
    context = click.Context(cli)
    assert list(SUMMARIES) == list(COMMANDS)
    for name in COMMANDS:
        command = cli.get_command(context, name)
        assert command is not None
        assert SUMMARIES[name] == command.get_short_help_str(10_000), name

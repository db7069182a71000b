"""Every command's --help shows an `Example:` (issue 29), and every example in the table names
options and choices its command really has, so a renamed option cannot leave a stale one."""

from __future__ import annotations

import shlex

import click
import pytest
from click.testing import CliRunner

from dlrig.cli import examples
from dlrig.cli.main import cli


def _tree() -> dict[str, click.Command]:
    ctx = click.Context(cli)
    found: dict[str, click.Command] = {"": cli}

    def walk(group: click.Group, path: str) -> None:
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            assert command is not None
            sub = f"{path} {name}".strip()
            found[sub] = command
            if isinstance(command, click.Group):
                walk(command, sub)

    walk(cli, "")
    return found


TREE = _tree()


@pytest.mark.parametrize("path", sorted(TREE))
def test_every_help_shows_an_example(path: str) -> None:
    result = CliRunner().invoke(cli, [*path.split(), "--help"])
    assert result.exit_code == 0, result.output
    head = result.output.split("\nOptions:")[0]
    assert "\n  Example:\n    dlrig" in head, f"dlrig {path} --help has no example"


def test_the_table_names_only_real_commands() -> None:
    assert set(examples.EXAMPLES) <= set(TREE)


# Groups that run a default subcommand on arguments that are not a subcommand's name:
# `dlrig plan WORKLOAD`, `dlrig profile TRACE` / `dlrig profile -- CMD`.
DEFAULT_SUBCOMMAND = {"plan": "workloads", "profile": "steps"}


def _resolve(tokens: list[str]) -> tuple[str, list[str]]:
    path: list[str] = []
    command: click.Command = cli
    while isinstance(command, click.Group) and tokens and not tokens[0].startswith("-"):
        name = tokens[0]
        if name not in command.list_commands(click.Context(command)):
            group = " ".join(path)
            assert group in DEFAULT_SUBCOMMAND, f"{name!r} is not a subcommand of {path}"
            name, tokens = DEFAULT_SUBCOMMAND[group], [DEFAULT_SUBCOMMAND[group], *tokens]
        path.append(name)
        tokens = tokens[1:]
        command = TREE[" ".join(path)]
    return " ".join(path), tokens


ROWS = [
    (path, invocation)
    for path, rows in sorted(examples.EXAMPLES.items())
    for invocation, _purpose in rows
]


@pytest.mark.parametrize(("path", "invocation"), ROWS)
def test_each_example_uses_options_its_command_has(path: str, invocation: str) -> None:
    tokens = shlex.split(invocation)
    assert tokens[0] == "dlrig"
    named, rest = _resolve(tokens[1:])
    if path:
        # an example listed under a command runs that command (or, on a group, one below it)
        assert named == path or named.startswith(path + " ") or path in DEFAULT_SUBCOMMAND
    command = TREE[named]
    options = {
        opt: param
        for param in command.params
        if isinstance(param, click.Option)
        for opt in (*param.opts, *param.secondary_opts)
    }
    for index, token in enumerate(rest):
        if token == "--":
            break  # the rest is another program's command line
        if not token.startswith("-") or token == "-":
            continue
        name = token.split("=", 1)[0]
        assert name in options, f"{invocation}: dlrig {named} has no option {name}"
        param = options[name]
        if isinstance(param.type, click.Choice) and not param.is_flag:
            value = token.split("=", 1)[1] if "=" in token else rest[index + 1]
            assert value in param.type.choices, f"{invocation}: {value!r} not a choice of {name}"

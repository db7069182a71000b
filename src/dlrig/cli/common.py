"""What every command shares: output options, the console, JSON printing."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def json_option(function: F) -> F:
    """--json: print a stable, versioned JSON document instead of the readable report."""
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print a JSON document (with schema_version) instead of text.",
    )(function)


def print_json(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")


def console(stderr: bool = False) -> Any:
    """A rich console; colours only on terminals, plain text in pipes."""
    from rich.console import Console

    probe = Console(stderr=stderr)
    # In pipes and files keep lines whole: a wrapped fix command cannot be pasted.
    return Console(stderr=stderr, highlight=False, soft_wrap=not probe.is_terminal)


def console_wide() -> Any:
    """The console; in files and pipes wide enough that table rows are never cut."""
    out = console()
    if not out.is_terminal:
        out.width = max(out.width, 150)
    return out

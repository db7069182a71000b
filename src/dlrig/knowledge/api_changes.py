"""Names that a package release removed or added (`api_changes.csv`): an AttributeError,
ImportError or missing submodule naming one is that change, with its release and replacement,
not a misspelling or the project's own module."""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from dataclasses import dataclass

from dlrig.knowledge.tables import records


@dataclass(frozen=True)
class ApiChange:
    name: str  # dotted: package (and submodules), then the attribute or module
    change: str  # removed | added | unimported (no longer imported implicitly)
    distribution: str  # what pip installs it as ("python" for the standard library)
    version: str
    replacement: str
    source: str
    as_of: str


@functools.cache
def changes() -> tuple[ApiChange, ...]:
    return records("api_changes", ApiChange)


@functools.cache
def _by_name() -> dict[str, ApiChange]:
    return {change.name: change for change in changes()}


def change_for(package: str, name: str) -> ApiChange | None:
    """The change behind `package`'s missing `name`; a removed module answers for its
    submodules too (tensorflow.contrib.slim is tensorflow.contrib's removal)."""
    package = {"np": "numpy"}.get(package, package)
    parts = f"{package}.{name}".split(".")
    for end in range(len(parts), 1, -1):
        change = _by_name().get(".".join(parts[:end]))
        if change is not None and (end == len(parts) or change.change == "removed"):
            return change
    return None


@functools.cache
def message_patterns() -> tuple[str, ...]:
    """Patterns for the messages that name a change of the table, with the groups `package`
    and `name` (one per package, so the table is the only list of names)."""
    attributes: dict[str, list[str]] = defaultdict(list)
    modules: dict[str, list[str]] = defaultdict(list)
    for change in changes():
        package, _, attribute = change.name.rpartition(".")
        attributes[package].append(re.escape(attribute))
        top, _, rest = change.name.partition(".")
        modules[top].append(re.escape(rest))
    patterns: list[str] = []
    for package, names in attributes.items():
        alternatives = "|".join(names)
        escaped = re.escape(package)
        patterns.append(
            f"module '(?P<package>{escaped})' has no attribute '(?P<name>{alternatives})'"
        )
        patterns.append(
            f"cannot import name '(?P<name>{alternatives})' from '(?P<package>{escaped})'"
        )
    # NumPy 2 says it itself: "`np.NaN` was removed in the NumPy 2.0 release. Use `np.nan` instead."
    numpy = "|".join(
        re.escape(c.name.split(".", 1)[1]) for c in changes() if c.name.startswith("numpy.")
    )
    patterns.append(f"`(?P<package>np)\\.(?P<name>{numpy})` was removed in the NumPy")
    # NumPy 1.24's AttributeError goes on: "`np.float` was a deprecated alias for the builtin
    # `float`. To avoid this error in existing code, use `float` by itself." (1.20's warning says
    # "is a deprecated alias" and fails nothing)
    patterns.append(f"`?(?P<package>np)\\.(?P<name>{numpy})`? was a deprecated alias for")
    for top, names in modules.items():
        alternatives = "|".join(names)
        patterns.append(
            f"No module named '(?P<package>{re.escape(top)})\\.(?P<name>(?:{alternatives})(?:\\.[\\w.]+)?)'"
        )
    return tuple(patterns)

"""Loading and validating the CSV tables in `knowledge/data/`.

`data/manifest.toml` lists every table with its version and the columns it must have. A row
without a source is rejected: a fact we cannot trace is not a fact we ship.
"""

from __future__ import annotations

import csv
import functools
import io
import tomllib
from dataclasses import dataclass
from importlib import resources

from dlrig.errors import DlrigError


class KnowledgeError(DlrigError):
    """A packaged table is malformed: a bug in dlrig, not in the user's input."""


@dataclass(frozen=True)
class TableInfo:
    name: str
    file: str
    version: str
    description: str
    required_columns: tuple[str, ...]


def _data_text(file: str) -> str:
    return resources.files("dlrig.knowledge").joinpath("data", file).read_text(encoding="utf-8")


@functools.cache
def manifest() -> dict[str, TableInfo]:
    raw = tomllib.loads(_data_text("manifest.toml"))
    tables = {}
    for name, entry in raw.get("tables", {}).items():
        tables[name] = TableInfo(
            name=name,
            file=str(entry["file"]),
            version=str(entry["version"]),
            description=str(entry.get("description", "")),
            required_columns=tuple(entry.get("columns", ())),
        )
    return tables


@functools.cache
def rows(name: str) -> tuple[dict[str, str], ...]:
    """All rows of a table as dicts of stripped strings, validated against the manifest."""
    try:
        info = manifest()[name]
    except KeyError:
        raise KnowledgeError(f"no knowledge table named {name!r}") from None
    reader = csv.DictReader(io.StringIO(_data_text(info.file)))
    header = tuple(reader.fieldnames or ())
    missing = [column for column in info.required_columns if column not in header]
    if missing:
        raise KnowledgeError(f"knowledge table {info.file} lacks columns {missing}")
    result = []
    for number, row in enumerate(reader, start=2):
        clean = {key: (value or "").strip() for key, value in row.items() if key is not None}
        if not any(clean.values()):
            continue
        if "source" in header and not clean.get("source"):
            raise KnowledgeError(f"knowledge table {info.file} line {number} has no source")
        result.append(clean)
    return tuple(result)


def optional_float(value: str) -> float | None:
    value = value.strip()
    if not value:
        return None
    return float(value)


def optional_int(value: str) -> int | None:
    value = value.strip()
    if not value:
        return None
    return int(float(value))

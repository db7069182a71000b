"""Loading and validating the CSV tables in `knowledge/data/`.

`data/manifest.toml` lists every table with its version and the columns it must have. A row
without a source is rejected: a fact we cannot trace is not a fact we ship.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import tomllib
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from dlrig.errors import DlrigError
from dlrig.knowledge.versions import Version

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    R = TypeVar("R", bound=DataclassInstance)

V = TypeVar("V")


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


def versioned_rows(table: str, column: str) -> Iterator[tuple[Version, dict[str, str]]]:
    """The rows of `table` whose `column` holds a version, with it parsed; the others (notes,
    "n/a") are passed over."""
    for row in rows(table):
        version = Version.parse(row[column])
        if version is not None:
            yield version, row


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


def yes_no(value: str, table: str) -> bool:
    if value not in ("yes", "no"):
        raise KnowledgeError(f"knowledge table {table}: {value!r} is not yes or no")
    return value == "yes"


def split_list(value: str) -> tuple[str, ...]:
    """ "a;b;c" -> ("a", "b", "c"): how a table cell holds several values."""
    return tuple(part for part in value.split(";") if part)


# How a column is read, by the annotation of the field it fills. A type not listed here is
# given explicitly by the loader (a parsed date, a renamed or derived column).
_READERS: dict[object, Callable[[str], object]] = {
    str: str,
    str | None: lambda value: value or None,
    int: int,
    float: float,
    int | None: optional_int,
    float | None: optional_float,
    tuple[str, ...]: split_list,
    Version | None: Version.parse,
}


@functools.cache
def _fields(cls: type[Any]) -> tuple[tuple[str, object, bool], ...]:
    """(name, annotation, has a default) of each field of a dataclass."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (
            f.name,
            hints[f.name],
            f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING,
        )
        for f in dataclasses.fields(cls)
    )


def check_choices(
    table: str, row: Mapping[str, str], choices: Mapping[str, tuple[str, ...]]
) -> None:
    """A KnowledgeError where a column holds a value outside its vocabulary."""
    for column, allowed in choices.items():
        if row[column] not in allowed:
            raise KnowledgeError(
                f"knowledge table {table}: {column} {row[column]!r} is not one of {allowed}"
            )


def record(
    table: str,
    cls: type[R],
    row: Mapping[str, str],
    /,
    choices: Mapping[str, tuple[str, ...]] | None = None,
    **given: Any,
) -> R:
    """A `cls` from one row of `table`: each field not in `given` is the column of its name,
    read by the field's type (str; `str | None`, empty is None; int; float; `int | None` and
    `float | None`, empty is None; bool, yes or no; `tuple[str, ...]`, `;`-separated;
    `Version | None`; a `Literal`, one of its words). A field with a default keeps it where the table has no such column.
    `choices` names columns that must hold one of a few values."""
    check_choices(table, row, choices or {})
    values = dict(given)
    for name, annotation, has_default in _fields(cls):
        if name in values or (has_default and name not in row):
            continue
        if annotation is bool:
            values[name] = yes_no(row[name], table)
        elif typing.get_origin(annotation) is Literal:  # a vocabulary: one of its words
            check_choices(table, row, {name: typing.get_args(annotation)})
            values[name] = row[name]
        elif annotation in _READERS:
            values[name] = _READERS[annotation](row[name])
        else:
            raise TypeError(f"{cls.__name__}.{name}: no reader for {annotation!r}; give it")
    return cls(**values)


def records(
    table: str, cls: type[R], choices: Mapping[str, tuple[str, ...]] | None = None
) -> tuple[R, ...]:
    """Every row of `table` as a `cls` (see `record`)."""
    return tuple(record(table, cls, row, choices) for row in rows(table))


def entry(entries: Mapping[str, V], key: str, table: str, what: str) -> V:
    """`entries[key]`, or a KnowledgeError naming the table: the key is one dlrig's own code
    asks for, so a missing row is a bug in dlrig, not the user's input."""
    try:
        return entries[key]
    except KeyError:
        raise KnowledgeError(f"{table} has no {what} {key!r}") from None

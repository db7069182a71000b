"""The exporter's metric table: one row a reading, with its dlrig name and its DCGM name.

The table is data, `assets/metrics.csv`: for each reading of a GPU, a MIG instance or the host,
the dlrig series (name, type, scale to base units, fixed labels, help) and the dcgm-exporter
series (name, type, scale to its units, its own help text), with the source of the DCGM names.
Both namings of the exporter read it; a reading without a name in one naming is not written in
that naming. Families whose labels come from the data itself (clock reasons, processes, Xid
codes, per-core CPU) are written by `dlrig.monitor.exposition`.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from dlrig.plain import word

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*$")
_KINDS: tuple[Literal["gauge", "counter"], ...] = ("gauge", "counter")
SUBJECTS: tuple[Literal["gpu", "mig", "host"], ...] = ("gpu", "mig", "host")
# Readings that are not a field of the reading's object but computed from it (exposition.py).
DERIVED = ("memory_free_bytes", "performance_state_number", "clocks_event_mask")


@dataclass(frozen=True)
class Series:
    """One metric as one naming writes it: value = reading × scale."""

    name: str
    kind: Literal["gauge", "counter"]
    scale: float
    labels: tuple[tuple[str, str], ...]
    help: str


@dataclass(frozen=True)
class Metric:
    subject: Literal["gpu", "mig", "host"]  # what `reading` is read from
    reading: str  # a field of the subject ("pcie.width_current"), or one of DERIVED
    dlrig: Series | None
    dcgm: Series | None
    source: str
    as_of: str
    # AMD's device-metrics-exporter name of the reading (`serve --amd-names`), where it has one.
    amd: Series | None = None

    def series(self, naming: str) -> Series | None:
        """The series of one naming: dlrig, dcgm or amd."""
        return {"dlrig": self.dlrig, "dcgm": self.dcgm, "amd": self.amd}[naming]


def _scale(text: str, where: str) -> float:
    numerator, _, denominator = text.partition("/")
    try:
        value = float(numerator) / (float(denominator) if denominator else 1.0)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"{where}: scale {text!r} is not a number") from None
    return value


def _labels(text: str, where: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in filter(None, text.split(";")):
        key, sep, value = item.partition("=")
        if not sep or not _NAME.match(key):
            raise ValueError(f"{where}: label {item!r} is not NAME=VALUE")
        pairs.append((key, value))
    return tuple(pairs)


def _series(row: dict[str, str], naming: str, help_key: str, where: str) -> Series | None:
    name = (row.get(f"{naming}_name") or "").strip()
    if not name:
        return None
    kind = row[f"{naming}_type"].strip()
    if not _NAME.match(name) or kind not in _KINDS:
        raise ValueError(f"{where}: {naming} series {name!r} of type {kind!r} is not valid")
    if naming == "dlrig" and (kind == "counter") != name.endswith("_total"):
        raise ValueError(f"{where}: {name}: dlrig counters, and only they, end in _total")
    help_text = row[help_key].strip()
    if not help_text:
        raise ValueError(f"{where}: {name} has no help text")
    return Series(
        name=name,
        kind=word(_KINDS, kind, where),
        scale=_scale(row[f"{naming}_scale"].strip(), where),
        labels=_labels(row.get(f"{naming}_labels", "") or "", where),
        help=help_text,
    )


def parse(text: str) -> tuple[Metric, ...]:
    """The table from its CSV text; ValueError names the row that is wrong."""
    metrics = []
    families: dict[str, tuple[str, str]] = {}
    for number, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        where = f"metrics.csv line {number}"
        if row["of"] not in SUBJECTS:
            raise ValueError(f"{where}: 'of' must be one of {', '.join(SUBJECTS)}")
        if not row["source"].strip() or not row["as_of"].strip():
            raise ValueError(f"{where}: every row needs source and as_of")
        metric = Metric(
            subject=word(SUBJECTS, row["of"], where),
            reading=row["reading"].strip(),
            dlrig=_series(row, "dlrig", "help", where),
            dcgm=_series(row, "dcgm", "dcgm_help", where),
            source=row["source"].strip(),
            as_of=row["as_of"].strip(),
            amd=_series(row, "amd", "amd_help", where),
        )
        if metric.amd is not None and not (row.get("amd_source") or "").strip():
            raise ValueError(f"{where}: {metric.amd.name} needs its amd_source")
        if metric.dlrig is None and metric.dcgm is None and metric.amd is None:
            raise ValueError(f"{where}: {metric.reading} has no name in any naming")
        for series in (metric.dlrig, metric.dcgm, metric.amd):
            # A family shares one type and one help line, whichever rows write it.
            if series is not None:
                seen = families.setdefault(series.name, (series.kind, series.help))
                if seen != (series.kind, series.help):
                    raise ValueError(f"{where}: {series.name} differs from its earlier rows")
        metrics.append(metric)
    return tuple(metrics)


@functools.cache
def metrics() -> tuple[Metric, ...]:
    text = resources.files("dlrig.monitor").joinpath("assets", "metrics.csv").read_text("utf-8")
    return parse(text)


@functools.cache
def of(subject: str) -> tuple[Metric, ...]:
    """The rows read from one subject (gpu, mig or host), in table order."""
    return tuple(m for m in metrics() if m.subject == subject)

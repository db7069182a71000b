"""Sizes read from a log, and the figures a fix is computed from (`figures` in --json)."""

from __future__ import annotations

import re

_SIZE = re.compile(r"([\d.]+)\s*([KMGT]?i?B|bytes)", re.I)
_SCALE = {
    "b": 1,
    "bytes": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}


# Numbers a fix is built from travel beside its text, as `figures` in the JSON document
# (--json: the new micro-batch, the accumulation, the memory needed). Advisors return them under
# this prefix; `variables` splits them off.
FIGURE = "figure:"

# An advisor that reads, in the log's own facts, something the finding's claim does not fit (a
# driver nvidia-smi shows beside "no driver", memory free beside "out of memory") returns why under
# this key: the finding is then offered as a possible cause, never as the verdict.
DOUBT = "_doubt"


def as_figures(**values: float | int) -> dict[str, str]:
    return {FIGURE + name: repr(value) for name, value in values.items()}


def human_size(value: float) -> str:
    for unit, scale in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value:,.0f} bytes"


def parse_size(text: str | None) -> float | None:
    """ "20.00 MiB" -> bytes; "0 bytes" -> 0."""
    if not text:
        return None
    match = _SIZE.search(text)
    if not match:
        return None
    return float(match.group(1)) * _SCALE[match.group(2).lower()]


def gib(value: float) -> str:
    return f"{value / 1024**3:.2f} GiB"

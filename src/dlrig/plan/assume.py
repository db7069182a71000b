"""The plan's inputs: defaults from plan_assumptions.csv, overridden by options or --assume.

Each value remembers where it came from. A default whose table row is not backed by a source
is an ASSUMPTION: the plan lists every one it used, labelled, so the reader knows which figures
to replace with their own.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dlrig.errors import InputError
from dlrig.knowledge import plan as knowledge


@dataclass(frozen=True)
class Input:
    name: str
    value: str
    unit: str
    origin: str  # "default" | the option or "--assume" that set it
    assumption: bool  # an unsourced default the user did not replace
    description: str
    source: str

    def to_dict(self) -> dict[str, object]:
        value: object = self.value
        with contextlib.suppress(ValueError):
            value = float(self.value)
        return {
            "name": self.name,
            "value": value,
            "unit": self.unit,
            "origin": self.origin,
            "assumption": self.assumption,
            "description": self.description,
            "source": self.source,
        }


def parse_assume(items: Iterable[str]) -> dict[str, str]:
    """`--assume NAME=VALUE` items as a dict, each name checked against the table."""
    table = knowledge.assumptions()
    result: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise InputError(
                f"--assume {item!r} is not NAME=VALUE", fix="e.g. --assume spot_discount=0.6"
            )
        if name not in table:
            raise InputError(
                f"--assume {name}: no such assumption",
                fix="one of: " + ", ".join(sorted(table)),
            )
        _check_number(name, value, f"--assume {name}")
        result[name] = value
    return result


def _check_number(name: str, value: str, flag: str) -> None:
    """A given value checked against its row's `allowed` interval: a PUE below 1, a spot
    discount above 1 or zero years would make every TCO after it meaningless."""
    allowed = knowledge.assumptions()[name].allowed
    if not allowed:
        if name == "psu_efficiency_level" and value not in knowledge.psu_levels():
            raise InputError(
                f"{flag}={value!r} is not an 80 PLUS level",
                fix="one of " + ", ".join(knowledge.psu_levels()),
            ) from None
        return
    try:
        number = float(value)
    except ValueError:
        raise InputError(
            f"{flag}={value!r} is not a number", fix=f"give a number for {name}"
        ) from None
    if not within(number, allowed):
        raise InputError(
            f"{flag}={value} is outside {allowed}",
            fix=f"give {name} in {allowed} ({_words(allowed)})",
        )


def within(number: float, interval: str) -> bool:
    """Whether `number` lies in an interval written "[0,1]", "(0,inf)" or "[1,inf)"."""
    low, high = interval[1:-1].split(",")
    above = number >= float(low) if interval[0] == "[" else number > float(low)
    below = number <= float(high) if interval[-1] == "]" else number < float(high)
    return math.isfinite(number) and above and below


def _words(interval: str) -> str:
    low, high = interval[1:-1].split(",")
    first = f"at least {low}" if interval[0] == "[" else f"more than {low}"
    if high == "inf":
        return first
    return first + (f" and at most {high}" if interval[-1] == "]" else f" and below {high}")


class Inputs:
    """Resolved inputs; `used()` lists the ones a computation actually read."""

    def __init__(
        self,
        assume: Mapping[str, str] | None = None,
        options: Mapping[str, tuple[str, float | str | None]] | None = None,
    ) -> None:
        # options: name -> (flag, value or None when the flag was not given)
        self._table = knowledge.assumptions()
        self._values: dict[str, Input] = {}
        for name, row in self._table.items():
            self._values[name] = Input(
                name, row.value, row.unit, "default", not row.sourced, row.description, row.source
            )
        for name, given in (assume or {}).items():
            row = self._table[name]
            self._values[name] = Input(
                name, given, row.unit, "--assume", False, row.description, "given by the user"
            )
        for name, (flag, value) in (options or {}).items():
            if value is None:
                continue
            row = self._table[name]
            _check_number(name, str(value), flag)
            self._values[name] = Input(
                name, str(value), row.unit, flag, False, row.description, "given by the user"
            )
        self._used: dict[str, None] = {}

    def number(self, name: str) -> float:
        self._used[name] = None
        return float(self._values[name].value)

    def text(self, name: str) -> str:
        self._used[name] = None
        return self._values[name].value

    def get(self, name: str) -> Input:
        return self._values[name]

    def used(self) -> list[Input]:
        return [self._values[name] for name in self._used]

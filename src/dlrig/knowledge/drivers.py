"""NVIDIA driver branches and their end of life."""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass

from dlrig.knowledge.tables import rows
from dlrig.knowledge.versions import Version


@dataclass(frozen=True)
class DriverBranch:
    branch: str  # "R535"
    designation: str | None  # LTSB | PB | NFB
    end_of_life: dt.date | None  # first day of the EOL month
    eol_without_date: bool  # listed as end of life with no date given
    max_cuda: str
    source: str
    first_release: dt.date | None = None  # first day of the month of its first release


def _month(text: str) -> dt.date | None:
    try:
        year, month = text.split("-")[:2]
        return dt.date(int(year), int(month), 1)
    except ValueError:
        return None


@functools.cache
def branches() -> dict[str, DriverBranch]:
    result = {}
    for row in rows("driver_branches"):
        eol_text = row["end_of_life"]
        result[row["branch"]] = DriverBranch(
            branch=row["branch"],
            designation=row["designation"] or None,
            end_of_life=_month(eol_text) if eol_text and eol_text != "eol" else None,
            eol_without_date=eol_text == "eol",
            max_cuda=row["max_cuda"],
            source=row["source"],
            first_release=_month(row["first_release"]) if row["first_release"] else None,
        )
    return result


def branch_of(driver_version: str) -> str | None:
    version = Version.parse(driver_version)
    return f"R{version.major}" if version else None


def lookup(driver_version: str) -> DriverBranch | None:
    branch = branch_of(driver_version)
    return branches().get(branch) if branch else None

"""NVIDIA driver branches and their end of life."""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass

from dlrig.knowledge.tables import record, rows
from dlrig.knowledge.versions import Version

# NVIDIA designations, most supported first: long-term, production, new feature branch.
DESIGNATION_RANK = {"LTSB": 0, "PB": 1, "NFB": 2}
DESIGNATION_NAMES = {
    "LTSB": "long-term support branch",
    "PB": "production branch",
    "NFB": "new feature branch",
}
# NVIDIA's note under its support matrix: every branch it no longer lists is end of life.
UNLISTED_ARE_EOL_SOURCE = (
    "https://docs.nvidia.com/datacenter/tesla/drivers/supported-drivers-and-cuda-toolkit-versions"
    ".html: 'All other previous driver branches not listed in the table above ... are end of life'"
)


@dataclass(frozen=True)
class DriverBranch:
    branch: str  # "R535"
    designation: str | None  # LTSB | PB | NFB
    end_of_life: dt.date | None  # first day of the EOL month
    eol_without_date: bool  # listed as end of life with no date given
    max_cuda: str
    source: str
    first_release: dt.date | None = None  # first day of the month of its first release

    @property
    def major(self) -> int:
        return int(self.branch.lstrip("R"))

    def supported_on(self, today: dt.date) -> bool:
        """A production or long-term branch before its end of life."""
        return (
            self.designation in ("LTSB", "PB")
            and not self.eol_without_date
            and self.end_of_life is not None
            and self.end_of_life > today
        )


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
        result[row["branch"]] = record(
            "driver_branches",
            DriverBranch,
            row,
            end_of_life=_month(eol_text) if eol_text and eol_text != "eol" else None,
            eol_without_date=eol_text == "eol",
            first_release=_month(row["first_release"]) if row["first_release"] else None,
        )
    return result


def branch_of(driver_version: str, windows: bool = False) -> str | None:
    """ "535.104.05" -> "R535". Windows drivers of a branch number up to 9 past it (R570 ships
    572.83, R550 551.86): the nearest known branch at or below is theirs."""
    version = Version.parse(driver_version)
    if version is None:
        return None
    if windows:
        known = sorted((b.major for b in branches().values()), reverse=True)
        for major in known:
            if major <= version.major < major + 10:
                return f"R{major}"
    return f"R{version.major}"


def lookup(driver_version: str, windows: bool = False) -> DriverBranch | None:
    branch = branch_of(driver_version, windows)
    return branches().get(branch) if branch else None


def supported(today: dt.date) -> list[DriverBranch]:
    """The production and long-term branches NVIDIA supports today, oldest first."""
    return sorted((b for b in branches().values() if b.supported_on(today)), key=lambda b: b.major)

"""Which NVIDIA driver to install when a wheel needs a newer one: the branch, and how.

A supported long-term branch (LTSB) first, then production or feature branches; a branch
counts once NVIDIA published it (its first release month has passed, or a CUDA toolkit's
Table-3 minimum lies on it). Any driver at or above a CUDA release's minimum runs it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge import drivers as driver_knowledge
from dlrig.knowledge.versions import Version

if TYPE_CHECKING:
    from dlrig.knowledge.resolver import Request


@dataclass(frozen=True)
class DriverUpgrade:
    min_version: str  # the lowest driver that works: "580.65.06"
    branch: str | None  # the branch to install: "R580"
    designation: str | None  # LTSB | PB | NFB
    end_of_life: str | None  # "2028-06"
    command: str  # how to get it
    windows: bool = False

    def text(self) -> str:
        branch = ""
        if self.branch:
            branch = f" ({self.branch}" + (f" {self.designation}" if self.designation else "")
            branch += f", supported until {self.end_of_life})" if self.end_of_life else ")"
        return f"Upgrade the NVIDIA driver to ≥ {self.min_version}{branch}: {self.command}"


def _released_majors() -> set[int]:
    majors = set()
    for row in cuda_knowledge.driver_minimums():
        for floor in (row.min_driver_linux,):
            if floor is not None:
                majors.add(floor.major)
    return majors


def branch_for(minimum: Version, today: dt.date) -> driver_knowledge.DriverBranch | None:
    """The driver branch to install for at least `minimum`: a supported long-term branch first."""
    released = _released_majors()
    fitting = []
    for branch in driver_knowledge.branches().values():
        major = Version.parse(branch.branch.lstrip("R"))
        if major is None or major.major < minimum.major or branch.eol_without_date:
            continue
        if branch.end_of_life is not None and branch.end_of_life <= today:
            continue
        started = branch.first_release is not None and branch.first_release <= today
        if not started and major.major not in released:
            continue  # announced, not published yet
        fitting.append((branch.designation != "LTSB", major.major, branch))
    return min(fitting, key=lambda f: (f[0], f[1]))[2] if fitting else None


def recommended_branch_driver(today: dt.date, windows: bool = False) -> Version | None:
    """The newest published driver minimum on the newest supported long-term branch."""
    branch = branch_for(Version((0,)), today)
    if branch is None or branch.designation != "LTSB":
        return None
    major = int(branch.branch.lstrip("R"))
    floors = [
        (row.min_driver_windows if windows else row.min_driver_linux)
        for row in cuda_knowledge.driver_minimums()
    ]
    # Windows drivers number differently; match the branch on the Linux column.
    on_branch = [
        f
        for f, row in zip(floors, cuda_knowledge.driver_minimums(), strict=True)
        if f is not None
        and row.min_driver_linux is not None
        and row.min_driver_linux.major == major
    ]
    return max(on_branch) if on_branch else None


def driver_upgrade_for(
    minimum: Version | None, request: Request, windows: bool
) -> DriverUpgrade | None:
    if minimum is None:
        return None
    today = request.today or dt.date.today()
    branch = branch_for(minimum, today)
    if windows:
        command = "install it from https://www.nvidia.com/Download/index.aspx, then reboot"
        if request.windows_driver:
            command += " (on the Windows host: WSL2 runs on its driver; install none inside WSL)"
    elif branch is not None:
        command = (
            f"sudo apt install nvidia-driver-{branch.branch.lstrip('R')}   # Ubuntu; or your "
            "distribution's package or NVIDIA's .run installer; then reboot and check `nvidia-smi`"
        )
    else:
        command = "install it from https://www.nvidia.com/Download/index.aspx, then reboot"
    return DriverUpgrade(
        min_version=str(minimum),
        branch=branch.branch if branch else None,
        designation=branch.designation if branch else None,
        end_of_life=f"{branch.end_of_life:%Y-%m}" if branch and branch.end_of_life else None,
        command=command,
        windows=windows,
    )

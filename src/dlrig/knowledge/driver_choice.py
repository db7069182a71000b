"""Which NVIDIA driver to install when a wheel needs a newer one: the branch, and how.

A supported long-term branch (LTSB) first, then production, then new-feature branches; a
branch counts once NVIDIA published it (its first release month has passed, or a CUDA toolkit's
Table-3 minimum lies on it). Any driver at or above a CUDA release's minimum runs it.

Two bounds every driver fix obeys:
- the GPUs' architecture ends at a last branch (Kepler R470, Maxwell-Volta R580: see
  `knowledge/architectures.py`); a need above it is a `DriverLimit`, never an upgrade;
- the package named comes from one policy, `driver_package()`, shared with `dlrig provision`:
  open or proprietary kernel modules by architecture (`provision_driver_policy.csv`), NVIDIA's
  repository packages per OS release (`provision_nvidia_packages.csv`) and the distribution's
  own package names (`driver_distro_packages.csv`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dlrig.knowledge import architectures as arch_knowledge
from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge import drivers as driver_knowledge
from dlrig.knowledge.driver_packages import (
    RPM_FAMILY,
    apt_command,
    distro_package,
    dnf_command,
    kernel_modules_for,
)
from dlrig.knowledge.provision import match_os_release, os_releases
from dlrig.knowledge.versions import Version
from dlrig.knowledge.wheel_fit import capabilities_of

if TYPE_CHECKING:
    from dlrig.knowledge.resolver import Request

__all__ = [
    "DriverLimit",
    "DriverPackage",
    "DriverUpgrade",
    "branch_floor",
    "branch_for",
    "branch_major",
    "driver_limit_for",
    "driver_package",
    "driver_upgrade_for",
    "kernel_modules_for",
    "recommended_branch_driver",
]

_DOWNLOAD = "install it from https://www.nvidia.com/Download/index.aspx, then reboot"


@dataclass(frozen=True)
class DriverUpgrade:
    min_version: str  # the lowest driver that works: "580.65.06"
    branch: str | None  # the branch to install: "R580"
    designation: str | None  # LTSB | PB | NFB
    end_of_life: str | None  # "2028-06"
    command: str  # how to get it
    windows: bool = False
    # The release to install on that branch: its newest Table-3 minimum (one number per branch
    # in every fix), or `min_version` when that is higher. None: the table has none (Windows 13.x).
    install_version: str | None = None
    branch_note: str | None = None  # "supported until 2028-06", "the last branch for Kepler GPUs"
    kernel_modules: Literal["open", "proprietary"] | None = None  # (Linux)

    def text(self) -> str:
        if not self.branch:
            return f"Upgrade the NVIDIA driver to ≥ {self.min_version}: {self.command}"
        label = f"{self.branch} {self.designation}" if self.designation else self.branch
        note = self.branch_note or (
            f"supported until {self.end_of_life}" if self.end_of_life else None
        )
        if self.install_version and self.install_version != self.min_version:
            extra = f", {note}" if note else ""
            return (
                f"Upgrade the NVIDIA driver (this needs ≥ {self.min_version}): install the "
                f"{label} (≥ {self.install_version}{extra}): {self.command}"
            )
        extra = f", {note}" if note else ""
        return f"Upgrade the NVIDIA driver to ≥ {self.min_version} ({label}{extra}): {self.command}"


@dataclass(frozen=True)
class DriverLimit:
    """The driver needed is past the last branch that supports these GPUs."""

    needed: str | None  # "411.31"; None: no particular need (a newer branch in general)
    architecture: str  # "Tesla"
    last_branch: str  # "R340"
    gpu_names: tuple[str, ...] = ()

    def text(self) -> str:
        gpu = f"{self.gpu_names[0]}: " if self.gpu_names else ""
        # No "driver ≥ X" wording: nothing tells the user to install that driver.
        need = f"; what is asked needs {self.needed} or newer" if self.needed else ""
        return (
            f"no newer driver supports this GPU ({gpu}{self.architecture} architecture, last "
            f"driver branch {self.last_branch}){need}"
        )


def _released_majors() -> set[int]:
    return {
        row.min_driver_linux.major
        for row in cuda_knowledge.driver_minimums()
        if row.min_driver_linux is not None
    }


def branch_for(
    minimum: Version, today: dt.date, last_branch: int | None = None
) -> driver_knowledge.DriverBranch | None:
    """The driver branch to install for at least `minimum`: a supported long-term branch first,
    then production, then new-feature branches; none past `last_branch` (the GPUs' last).

    When no supported branch fits under `last_branch`, that last branch itself (however old:
    it is the only one that runs the GPU), if `minimum` lies on or below it.
    """
    released = _released_majors()
    fitting = []
    for branch in driver_knowledge.branches().values():
        major = branch.major
        if major < minimum.major or branch.eol_without_date:
            continue
        if last_branch is not None and major > last_branch:
            continue
        if branch.end_of_life is not None and branch.end_of_life <= today:
            continue
        started = branch.first_release is not None and branch.first_release <= today
        if not started and major not in released:
            continue  # announced, not published yet
        rank = driver_knowledge.DESIGNATION_RANK.get(branch.designation or "", 3)
        fitting.append((rank, major, branch))
    if fitting:
        return min(fitting, key=lambda f: (f[0], f[1]))[2]
    if last_branch is not None and minimum.major <= last_branch:
        return driver_knowledge.branches().get(f"R{last_branch}")
    return None


def branch_floor(branch: driver_knowledge.DriverBranch, windows: bool = False) -> Version | None:
    """The release to install on a branch: the newest Table-3 minimum that lies on it."""
    floors = [
        (row.min_driver_windows if windows else row.min_driver_linux)
        for row in cuda_knowledge.driver_minimums()
        if row.min_driver_linux is not None and row.min_driver_linux.major == branch.major
    ]
    known = [f for f in floors if f is not None]
    return max(known) if known else None


def recommended_branch_driver(
    today: dt.date, windows: bool = False, last_branch: int | None = None
) -> Version | None:
    """The driver to name with no other need: the current long-term branch's release, or the
    GPUs' last branch's when their support ended before it."""
    branch = branch_for(Version((0,)), today, last_branch)
    if branch is None:
        return None
    if branch.designation != "LTSB" and (last_branch is None or branch.major != last_branch):
        return None
    return branch_floor(branch, windows)


def branch_major(minimum: Version, windows: bool) -> int:
    """The branch a driver minimum lies on; Windows numbers map through Table 3's pairs."""
    if windows:
        for row in cuda_knowledge.driver_minimums():
            if row.min_driver_windows == minimum and row.min_driver_linux is not None:
                return row.min_driver_linux.major
        named = driver_knowledge.branch_of(str(minimum), windows=True)
        if named:
            return int(named.lstrip("R"))
    return minimum.major


def _capabilities(request: Request) -> tuple[str, ...]:
    return capabilities_of(request)[0]


def driver_limit_for(
    minimum: Version | None, request: Request, windows: bool
) -> DriverLimit | None:
    """Set when `minimum` lies past the last branch that supports the request's GPUs."""
    if minimum is None:
        return None
    limit = arch_knowledge.driver_limit(_capabilities(request))
    if limit is None or limit.last_branch is None:
        return None
    if branch_major(minimum, windows) <= limit.last_branch:
        return None
    return DriverLimit(str(minimum), limit.label, f"R{limit.last_branch}", request.gpu_names)


def driver_upgrade_for(
    minimum: Version | None, request: Request, windows: bool, through_compat: bool = False
) -> DriverUpgrade | None:
    """How to reach a driver of at least `minimum`; None when no driver is needed, or when the
    GPUs cannot take one that new (`driver_limit_for` says so)."""
    if minimum is None or driver_limit_for(minimum, request, windows) is not None:
        return None
    today = request.today or dt.date.today()
    capabilities = _capabilities(request)
    limit = arch_knowledge.driver_limit(capabilities)
    cap = limit.last_branch if limit else None
    branch = branch_for(Version((branch_major(minimum, windows),)), today, cap)
    modules = None
    if windows:
        command = _DOWNLOAD
        if request.windows_driver:
            command += " (on the Windows host: WSL2 runs on its driver; install none inside WSL)"
    elif branch is not None:
        package = driver_package(branch.major, capabilities, request.os_name, request.gpu_names)
        command, modules = package.command(), package.kernel_modules
    else:
        command = _DOWNLOAD
    floor = branch_floor(branch, windows) if branch else None
    install = None
    if floor is not None:
        same_branch = branch_major(minimum, windows) == (branch.major if branch else -1)
        install = str(max(floor, minimum) if same_branch else floor)
    return DriverUpgrade(
        min_version=str(minimum),
        branch=branch.branch if branch else None,
        designation=branch.designation if branch else None,
        end_of_life=f"{branch.end_of_life:%Y-%m}" if branch and branch.end_of_life else None,
        command=command,
        windows=windows,
        install_version=install,
        branch_note=_note(branch, today, limit, through_compat) if branch else None,
        kernel_modules=modules,
    )


def _note(
    branch: driver_knowledge.DriverBranch,
    today: dt.date,
    limit: arch_knowledge.Architecture | None,
    through_compat: bool = False,
) -> str | None:
    note = _branch_note(branch, today, limit)
    if through_compat:
        return (
            note + "; " if note else ""
        ) + "it runs the wheel through minor-version compatibility"
    return note


def _branch_note(
    branch: driver_knowledge.DriverBranch,
    today: dt.date,
    limit: arch_knowledge.Architecture | None,
) -> str | None:
    last = limit is not None and limit.last_branch == branch.major
    if branch.end_of_life is not None and branch.end_of_life <= today:
        ended = f"end of life since {branch.end_of_life:%Y-%m}"
        return f"the last branch for {limit.label} GPUs; {ended}" if last and limit else ended
    if last and limit:
        return f"the last branch for {limit.label} GPUs" + (
            f", supported until {branch.end_of_life:%Y-%m}" if branch.end_of_life else ""
        )
    if branch.end_of_life is not None:
        return f"supported until {branch.end_of_life:%Y-%m}"
    if branch.designation == "NFB":
        return "a new feature branch: no long-term fixes"
    return None


# --- which package: the one policy doctor's fixes and `dlrig provision host` share ------------


@dataclass(frozen=True)
class DriverPackage:
    """The packages that install one driver branch with the right kernel modules."""

    branch: int  # 580
    kernel_modules: Literal["open", "proprietary"]
    modules_reason: str
    os_release: str | None  # provision's id ("ubuntu-24.04") when the OS is one it knows
    nvidia_repo: str | None  # "sudo apt install nvidia-driver-pinning-580 nvidia-open"
    distro_package: str | None  # Ubuntu's own package: "nvidia-driver-580-server-open"
    alternatives: tuple[str, ...] = ()  # the same for the other package family (OS unknown)

    def command(self) -> str:
        """One line to paste: a command, with the alternatives after `#` (a shell comment)."""
        notes: list[str] = []
        if self.nvidia_repo:
            first = self.nvidia_repo
            notes.append("NVIDIA's CUDA repository, as `dlrig provision host` sets it up")
            notes.extend(self.alternatives)
            if self.distro_package:
                notes.append(f"or Ubuntu's archive: sudo apt install {self.distro_package}")
        elif self.distro_package:
            first = f"sudo apt install {self.distro_package}"
            notes += ["Ubuntu's archive", f"elsewhere NVIDIA's .run installer for R{self.branch}"]
        else:
            return (
                f"install the R{self.branch} driver ({self.kernel_modules} kernel modules, "
                f"{self.modules_reason}) with your distribution's package or NVIDIA's .run "
                "installer, then reboot and check `nvidia-smi`"
            )
        return (
            f"{first}   # {self.kernel_modules} kernel modules ({self.modules_reason}); "
            + "; ".join(notes)
            + "; then reboot and check `nvidia-smi`"
        )


def driver_package(
    branch: int,
    capabilities: tuple[str, ...] = (),
    os_name: str | None = None,
    gpu_names: tuple[str, ...] = (),
) -> DriverPackage:
    """The packages for driver branch `branch` on these GPUs and this OS (None: unknown).

    The kernel modules follow the GPU architectures (provision's policy table); the NVIDIA
    repository packages are those `dlrig provision host` installs for that OS release
    (`provision_nvidia_packages.csv`); on Ubuntu, or an unknown OS, Ubuntu's own package too.
    """
    modules, why = kernel_modules_for(capabilities, branch)
    release = match_os_release(os_name) if os_name else None
    lowered = (os_name or "").lower()
    alternatives: list[str] = []
    apt_os = next((r.id for r in os_releases().values() if r.family == "apt"), "")
    dnf_os = next((r.id for r in os_releases().values() if r.family == "dnf"), "")
    if release is not None:
        family, os_id = release.family, release.id
    elif RPM_FAMILY.search(lowered):
        family, os_id = "dnf", dnf_os
    else:
        family, os_id = "apt", apt_os
    nvidia = (
        apt_command(branch, modules, os_id)
        if family == "apt"
        else dnf_command(branch, modules, os_id)
    )
    if not os_name:
        # OS unknown (an nvidia-smi table, a paste cut before its OS line): apt first, dnf too.
        other = dnf_command(branch, modules, dnf_os)
        if other:
            alternatives.append(f"RHEL/Rocky: {other}")
    ubuntu = not os_name or "ubuntu" in lowered
    distro = distro_package("ubuntu", modules, branch, gpu_names) if ubuntu else None
    return DriverPackage(
        branch=branch,
        kernel_modules=modules,
        modules_reason=why,
        os_release=release.id if release else None,
        nvidia_repo=nvidia,
        distro_package=distro,
        alternatives=tuple(alternatives),
    )

"""What `dlrig provision` needs beyond the resolver: OS releases, NVIDIA's repositories, kernel
module flavours, nvidia/cuda image tags, NCCL variable classes and measured power-limit costs.

Every answer comes from a table in `data/provision_*.csv` (each row with its source); nothing
here guesses a package name or a tag from a formula.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Literal

from dlrig.errors import InputError
from dlrig.knowledge.tables import record, records, rows, split_list
from dlrig.knowledge.versions import Version, compare


@dataclass(frozen=True)
class OsRelease:
    id: str  # "ubuntu-24.04"
    name: str
    family: str  # apt | dnf
    id_like: str
    version_id: str
    codename: str
    cuda_repo: str  # "ubuntu2404" (developer.download.nvidia.com/compute/cuda/repos/<this>/x86_64)
    container_toolkit_repo: str  # deb | rpm
    cuda_image_os: str  # "ubuntu24.04": the nvidia/cuda image OS for containers built for it
    source: str


@functools.cache
def os_releases() -> dict[str, OsRelease]:
    return {release.id: release for release in records("provision_os_releases", OsRelease)}


_ALIASES = {
    "rhel-9": "rocky-9",
    "rocky-9": "rocky-9",
    "alma-9": "rocky-9",
    "almalinux-9": "rocky-9",
}


def os_release(text: str) -> OsRelease:
    """An OS release from an id ("ubuntu-24.04"), a spelling ("Ubuntu 24.04", "rhel9") or a
    PRETTY_NAME ("Ubuntu 22.04.4 LTS", "Debian GNU/Linux 12 (bookworm)", "Rocky Linux 9.3")."""
    found = match_os_release(text)
    if found is None:
        raise InputError(
            f"--os {text}: not an OS release dlrig provisions",
            fix="use one of: " + ", ".join(os_releases()),
        )
    return found


def match_os_release(text: str) -> OsRelease | None:
    known = os_releases()
    lowered = text.strip().lower()
    if lowered in known:
        return known[lowered]
    compact = re.sub(r"[^a-z0-9.]+", " ", lowered).strip()
    ubuntu = re.search(r"\bubuntu\s*(22\.04|24\.04)", compact)
    if ubuntu:
        return known.get(f"ubuntu-{ubuntu.group(1)}")
    if re.search(r"\bdebian\b.*?\b12\b", compact):
        return known.get("debian-12")
    if re.search(r"\b(rocky|rhel|red hat|alma|almalinux|centos stream)\b\D*?9(\.\d+)?\b", compact):
        return known.get("rocky-9")
    if re.search(r"\b(rhel|rocky|alma)\s*9\b", compact):
        return known.get("rocky-9")
    return known.get(_ALIASES.get(lowered, ""))


@dataclass(frozen=True)
class RepoPackage:
    os_release: str
    component: str  # keyring | driver_pin | driver_stream | driver_open | driver_proprietary | ...
    package: str
    version: str
    cuda_min: Version | None
    cuda_max: Version | None
    branch: str
    notes: str
    source: str

    def covers_cuda(self, cuda: str) -> bool:
        wanted = Version.parse(cuda)
        if wanted is None:
            return False
        minor = wanted.truncated(2)
        if self.cuda_min is not None and minor < self.cuda_min.truncated(2):
            return False
        return not (self.cuda_max is not None and minor > self.cuda_max.truncated(2))


@functools.cache
def repo_packages() -> tuple[RepoPackage, ...]:
    return records("provision_nvidia_packages", RepoPackage)


def repo_package(
    os_id: str, component: str, cuda: str | None = None, branch: str | None = None
) -> RepoPackage | None:
    """The package of one component in NVIDIA's repo for this OS release (None if it lacks it)."""
    for entry in repo_packages():
        if entry.os_release != os_id or entry.component != component:
            continue
        if cuda is not None and (entry.cuda_min or entry.cuda_max) and not entry.covers_cuda(cuda):
            continue
        if branch is not None and entry.branch and entry.branch != branch:
            continue
        return entry
    return None


def toolkit_minors(os_id: str) -> list[str]:
    return [
        str(p.cuda_min.truncated(2))
        for p in repo_packages()
        if p.os_release == os_id and p.component == "cuda_toolkit" and p.cuda_min
    ]


def package_names(os_id: str) -> frozenset[str]:
    return frozenset(p.package for p in repo_packages() if p.os_release == os_id)


@dataclass(frozen=True)
class DriverPolicy:
    architecture: str
    kernel_modules: str  # open | proprietary | unsupported
    open_supported: str  # yes | no | required
    last_branch: str | None  # the newest branch that still supports the architecture
    source: str


@functools.cache
def driver_policies() -> dict[str, DriverPolicy]:
    return {
        policy.architecture: policy for policy in records("provision_driver_policy", DriverPolicy)
    }


@dataclass(frozen=True)
class CudaImage:
    cuda_version: Version
    os: str
    cudnn: str  # "" | cudnn8 | cudnn
    flavors: tuple[str, ...]
    status: str  # supported | eol | deleted
    driver_branch: str
    source: str

    def tag(self, flavor: str) -> str:
        parts = [str(self.cuda_version)]
        if self.cudnn:
            parts.append(self.cudnn)
        parts += [flavor, self.os]
        return "-".join(parts)


@functools.cache
def cuda_images() -> tuple[CudaImage, ...]:
    result = []
    for row in rows("provision_cuda_images"):
        version = Version.parse(row["cuda_version"])
        if version is None:
            continue
        result.append(record("provision_cuda_images", CudaImage, row, cuda_version=version))
    return tuple(result)


@dataclass(frozen=True)
class NcclVariable:
    name: str
    category: str  # system | logging | debug
    refused_values: tuple[str, ...]  # ("*",) = any value
    reason: str
    source: str
    kept_instead: str = ""  # what a system file keeps in place of a refused value ("WARN")

    def refuses(self, value: str) -> bool:
        if not self.refused_values:
            return False
        return "*" in self.refused_values or value.strip().upper() in self.refused_values


@functools.cache
def nccl_variables() -> dict[str, NcclVariable]:
    table = "provision_nccl_variables"
    return {
        row["name"]: record(
            table,
            NcclVariable,
            row,
            refused_values=tuple(v.upper() for v in split_list(row["refused_values"])),
        )
        for row in rows(table)
    }


@dataclass(frozen=True)
class PowerLimitCost:
    gpu: str
    default_watts: float
    limited_watts: float
    workload: str
    performance_kept_percent: float
    source: str


@functools.cache
def power_limit_costs() -> tuple[PowerLimitCost, ...]:
    return records("provision_power_limits", PowerLimitCost)


@functools.cache
def _torch_python() -> dict[str, tuple[str, str, str]]:
    return {
        row["torch_version"]: (row["python_min"], row["python_max"], row["source"])
        for row in rows("provision_torch_python")
    }


def torch_python(torch_minor: str) -> tuple[str, str, str] | None:
    """(lowest Python, highest Python, source) with wheels for a torch release."""
    return _torch_python().get(torch_minor)


def torch_releases_for_python(python: str) -> list[str]:
    """The torch releases (minors, oldest first) with wheels for this Python ("3.13")."""
    return sorted(
        (
            torch
            for torch, (low, high, _) in _torch_python().items()
            if compare(low, python) <= 0 <= compare(high, python)
        ),
        key=functools.cmp_to_key(compare),
    )


@dataclass(frozen=True)
class ImagePython:
    image_os: str  # "ubuntu24.04": the nvidia/cuda OS suffix
    python: str
    packages: tuple[str, ...]  # what the OS's package manager installs for it (and venv)
    source: str
    interpreter: str = "python3"  # "python3.12" where the OS has several
    package_manager: Literal["apt", "dnf"] = "apt"
    os_image: str = ""  # the plain OS image ("ubuntu:24.04"), for bases without CUDA


@functools.cache
def image_pythons() -> tuple[ImagePython, ...]:
    # `packages` is space-separated in this table, as the package manager takes it.
    table = "provision_image_python"
    return tuple(
        record(table, ImagePython, row, packages=tuple(row["packages"].split()))
        for row in rows(table)
    )


@dataclass(frozen=True)
class PowerRange:
    gpu: str
    min_watts: float
    max_watts: float
    source: str


@functools.cache
def power_ranges() -> dict[str, PowerRange]:
    """The power-limit range nvidia-smi reports per catalogue GPU (`nvidia-smi -q -d POWER`)."""
    return {entry.gpu: entry for entry in records("provision_gpu_power_range", PowerRange)}

"""The package pieces `driver_choice.driver_package()` assembles: kernel-module flavour by
GPU architecture, NVIDIA's repository commands per OS release (the provision tables) and the
distribution's own package names (`driver_distro_packages.csv`)."""

from __future__ import annotations

import functools
import re
from typing import Literal

from dlrig.knowledge import architectures as arch_knowledge
from dlrig.knowledge.provision import repo_package, repo_packages
from dlrig.knowledge.tables import rows

RPM_FAMILY = re.compile(r"\b(rhel|red hat|rocky|alma|centos|fedora|oracle linux|amazon linux)\b")
_OPEN_FROM_BRANCH = 515  # NVIDIA published the open kernel modules with R515 (May 2022)
_OPEN_DEFAULT_FROM_BRANCH = 560  # "Starting in the 560 driver release series ... the default"


def kernel_modules_for(
    capabilities: tuple[str, ...], branch: int
) -> tuple[Literal["open", "proprietary"], str]:
    """(open | proprietary, why) for these GPUs on this branch, from provision's policy."""
    found = arch_knowledge.of_capabilities(capabilities)
    if branch < _OPEN_FROM_BRANCH:
        return "proprietary", f"R{branch} predates the open ones"
    proprietary = [a for a in found if a.kernel_modules in ("proprietary", "unsupported")]
    if proprietary:
        names = "/".join(a.label for a in proprietary)
        return "proprietary", f"{names} GPUs need them"
    if found and all(a.kernel_modules == "open" for a in found):
        names = "/".join(a.label for a in found)
        return "open", f"{names}: Turing and newer"
    if branch >= _OPEN_DEFAULT_FROM_BRANCH:
        return "open", "the default since R560; Turing and newer only"
    return "proprietary", "the default before R560"


@functools.cache
def _distro_rows() -> tuple[tuple[str, str, re.Pattern[str] | None, int | None, str], ...]:
    result = []
    for row in rows("driver_distro_packages"):
        pattern = re.compile(row["gpu_pattern"], re.I) if row["gpu_pattern"] else None
        first = int(row["first_branch"]) if row["first_branch"].isdigit() else None
        result.append((row["distribution"], row["kernel_modules"], pattern, first, row["package"]))
    return tuple(result)


def distro_package(
    distribution: str, modules: str, branch: int, gpu_names: tuple[str, ...]
) -> str | None:
    for name, flavour, pattern, first, package in _distro_rows():
        if name != distribution or flavour != modules or (first and branch < first):
            continue
        if pattern is not None and not any(pattern.search(g) for g in gpu_names):
            continue
        return package.replace("{branch}", str(branch))
    return None


def dnf_command(branch: int, modules: str, os_id: str = "rocky-9") -> str | None:
    suffix = "-open" if modules == "open" else "-dkms"
    stream = next(
        (
            p
            for p in repo_packages()
            if p.os_release == os_id
            and p.component == "driver_stream"
            and p.branch == str(branch)
            and p.package.endswith(suffix)
        ),
        None,
    )
    meta = repo_package(os_id, "driver_open" if modules == "open" else "driver_proprietary")
    if stream is None or meta is None:
        return None
    return f"sudo dnf module enable -y {stream.package} && sudo dnf install {meta.package}"


def apt_command(branch: int, modules: str, os_id: str) -> str | None:
    pin = repo_package(os_id, "driver_pin", branch=str(branch))
    meta = repo_package(os_id, "driver_open" if modules == "open" else "driver_proprietary")
    if pin is None or meta is None:
        return None
    return f"sudo apt install {pin.package} {meta.package}"

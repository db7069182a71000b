"""CUDA releases: the driver each needs, and the GPU architectures each supports."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from dlrig.knowledge.tables import record, versioned_rows
from dlrig.knowledge.versions import Version


@dataclass(frozen=True)
class DriverMinimum:
    cuda_version: Version  # x.y.z
    release_label: str
    min_driver_linux: Version | None
    min_driver_windows: Version | None
    source: str


@dataclass(frozen=True)
class MinorCompat:
    cuda_major: int
    min_driver_linux: Version
    min_driver_windows: Version | None
    source: str


@dataclass(frozen=True)
class ArchEvent:
    cuda_version: Version
    compute_capability: str
    event: str  # added | deprecated | removed
    notes: str
    source: str


@functools.cache
def driver_minimums() -> tuple[DriverMinimum, ...]:
    result = [
        record("cuda_driver_minimum", DriverMinimum, row, cuda_version=version)
        for version, row in versioned_rows("cuda_driver_minimum", "cuda_version")
    ]
    return tuple(sorted(result, key=lambda r: r.cuda_version))


@functools.cache
def minor_compat() -> dict[int, MinorCompat]:
    result = {}
    for floor, row in versioned_rows("cuda_minor_compat", "min_driver_linux"):
        major = int(row["cuda_major"].split(".")[0].rstrip("x"))
        result[major] = record(
            "cuda_minor_compat", MinorCompat, row, cuda_major=major, min_driver_linux=floor
        )
    return result


@dataclass(frozen=True)
class DriverRequirement:
    """What a CUDA x.y build needs from the Linux driver."""

    cuda: str
    full_support: Version  # minimum driver of the x.y GA release (everything works)
    full_support_source: str
    minor_compat_floor: Version | None  # below full_support, MVC may still run it
    minor_compat_source: str | None


@functools.cache
def driver_requirement(cuda: str, windows: bool = False) -> DriverRequirement | None:
    """The driver a build for CUDA `cuda` ("12.4" or "12.4.1") needs; None if the table lacks it.

    Windows drivers have their own numbering (e.g. 551.61 vs Linux 550.54.14).
    """
    wanted = Version.parse(cuda)
    if wanted is None:
        return None
    minor = wanted.truncated(2)

    def minimum(row: DriverMinimum) -> Version | None:
        return row.min_driver_windows if windows else row.min_driver_linux

    same_minor = [
        r for r in driver_minimums() if r.cuda_version.truncated(2) == minor and minimum(r)
    ]
    if not same_minor:
        return None
    # The first general release of x.y sets the floor for anything built against x.y (wheels
    # name x.y only); a release candidate (11.0.1 RC) is not one.
    ga = _first_release(same_minor)
    full = minimum(ga)
    assert full is not None
    compat = minor_compat().get(wanted.major)
    floor = None
    if compat is not None:
        floor = compat.min_driver_windows if windows else compat.min_driver_linux
    return DriverRequirement(
        cuda=str(minor),
        full_support=full,
        full_support_source=ga.source,
        minor_compat_floor=floor,
        minor_compat_source=compat.source if compat else None,
    )


def _first_release(candidates: list[DriverMinimum]) -> DriverMinimum:
    general = [r for r in candidates if "RC" not in r.release_label.split()]
    return min(general or candidates, key=lambda r: r.cuda_version)


def driver_requirement_for(cuda: str, windows: bool) -> tuple[DriverRequirement | None, bool]:
    """The requirement for this platform, and whether the Linux one stands in for it.

    The table has no Windows minimum for CUDA 13 (the toolkit stopped bundling a Windows
    driver); Windows drivers number within a few builds of Linux ones (570.65 vs 570.26 for
    12.8), so the Linux minimum is the closest floor the table can give.
    """
    requirement = driver_requirement(cuda, windows=windows)
    if requirement is None and windows:
        return driver_requirement(cuda, windows=False), True
    return requirement, False


def max_cuda_for_driver(driver: str, windows: bool = False) -> str | None:
    """The newest CUDA x.y whose first-release minimum this driver meets (from the table).

    Before CUDA 11 the table names build versions (10.1.105, 9.2.148), not x.y.0.
    """
    version = Version.parse(driver)
    if version is None:
        return None
    by_minor: dict[Version, list[DriverMinimum]] = {}
    for row in driver_minimums():
        floor = row.min_driver_windows if windows else row.min_driver_linux
        if floor is not None:
            by_minor.setdefault(row.cuda_version.truncated(2), []).append(row)
    best = None
    for minor, group in sorted(by_minor.items()):
        first = _first_release(group)
        floor = first.min_driver_windows if windows else first.min_driver_linux
        if floor is not None and version >= floor:
            best = minor
    return str(best) if best else None


@functools.cache
def arch_events() -> tuple[ArchEvent, ...]:
    return tuple(
        record(
            "cuda_arch_support", ArchEvent, row, cuda_version=version, compute_capability=row["sm"]
        )
        for version, row in versioned_rows("cuda_arch_support", "cuda_version")
    )


def arch_status(cuda: str, compute_capability: str) -> ArchEvent | None:
    """The latest event at or before CUDA `cuda` for this architecture (removed/deprecated/added)."""
    wanted = Version.parse(cuda)
    if wanted is None:
        return None
    relevant = [
        e
        for e in arch_events()
        if e.compute_capability == compute_capability and e.cuda_version <= wanted.padded(3)
    ]
    return max(relevant, key=lambda e: e.cuda_version) if relevant else None


@functools.cache
def first_cuda_for(compute_capability: str) -> Version | None:
    """The first CUDA release that can target this architecture, where the table records it.

    PTX only helps a newer GPU when the CUDA runtime it ships with knows that GPU: a CUDA 12.4
    build cannot run on sm_120 even with compute_90 PTX.
    """
    added = [
        e.cuda_version
        for e in arch_events()
        if e.compute_capability == compute_capability and e.event == "added"
    ]
    return min(added) if added else None


def variant_cuda(variant: str) -> Version | None:
    """ "cu124" -> 12.4, "cu92" -> 9.2; None for other names."""
    digits = variant.removeprefix("cu")
    if not variant.startswith("cu") or not digits.isdigit() or len(digits) < 2:
        return None
    return Version((int(digits[:-1]), int(digits[-1])))


def integer_version(component: str, value: str | None) -> str | None:
    """A CUDA or cuDNN version as the libraries print it as an integer (CUDA_VERSION,
    CUDNN_VERSION): CUDA 12010 -> 12.1, cuDNN 7102 -> 7.1.2, 8906 -> 8.9.6, 90100 -> 9.1.0."""
    if not value or not value.isdigit():
        return None
    number = int(value)
    if component == "CUDA":
        return f"{number // 1000}.{(number % 1000) // 10}"
    if component == "cuDNN" and number >= 10000:
        return f"{number // 10000}.{(number % 10000) // 100}.{number % 100}"
    return f"{number // 1000}.{(number % 1000) // 100}.{number % 100}"

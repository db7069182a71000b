"""Which published wheels run on a machine, and what each needs from the driver.

For every torch release and CUDA variant in the tables: does its architecture list run the
GPUs (cubins of the same major and a lower minor, or PTX the build's CUDA can JIT), which
driver gives full support (NVIDIA's Table-3 minimum, raised to the GPUs' own floor: the first
CUDA that knows them) and which runs it through minor-version compatibility, and how the
driver the user has fares against both. The resolver ranks these candidates.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge import gpus
from dlrig.knowledge import pytorch as torch_knowledge
from dlrig.knowledge.versions import Version, minor_of

if TYPE_CHECKING:
    from dlrig.knowledge.resolver import Request


# How a wheel's CUDA runs on the driver: its full minimum met, CUDA minor-version
# compatibility only, too old, or no driver known.
DriverMode = Literal["full", "minor_compat", "too_old", "unknown"]


@dataclass(frozen=True)
class Candidate:
    minor: str
    variant: str
    cuda: str | None
    status: str
    runs_gpus: bool
    gpu_notes: tuple[str, ...]
    full_min: Version | None  # driver for full support (Table 3, and the GPU's own floor)
    compat_min: Version | None  # driver for minor-version compatibility, when it applies
    mode: DriverMode  # against the driver given, or none given
    ptx_only: bool = False
    sources: tuple[str, ...] = field(default_factory=tuple)


def capabilities_of(request: Request) -> tuple[tuple[str, ...], list[str]]:
    problems = []
    found = [c.strip() for c in request.compute_capabilities if c and c.strip()]
    if request.gpu_ids:
        for gpu_id in request.gpu_ids:
            spec = gpus.catalogue().resolve(gpu_id)
            if spec is None or not spec.compute_capability:
                problems.append(f"GPU {gpu_id!r} is not in the catalogue")
                continue
            found.append(spec.compute_capability)
    unique = tuple(sorted(set(found), key=lambda c: Version.parse(c) or Version((0,))))
    return unique, problems


def gpu_floor(capabilities: tuple[str, ...], windows: bool) -> tuple[Version | None, list[str]]:
    """The driver every GPU needs at least: that of the first CUDA release that knows it."""
    floor: Version | None = None
    notes = []
    for capability in capabilities:
        first = cuda_knowledge.first_cuda_for(capability)
        if first is None:
            continue
        requirement, _ = cuda_knowledge.driver_requirement_for(str(first.truncated(2)), windows)
        if requirement is None:
            continue
        if floor is None or requirement.full_support > floor:
            floor = requirement.full_support
            notes.append(
                f"compute capability {capability} first appears in CUDA {first.truncated(2)}, "
                f"whose driver minimum is {requirement.full_support}"
            )
    return floor, notes


def _arch_entry(minor: str, variant: str, platform: str) -> tuple[object | None, str | None]:
    entry = torch_knowledge.arch_list(minor, variant, platform)
    if entry is not None:
        return entry, None
    if platform.startswith("windows"):
        # Windows wheels carry the Linux list and sometimes more (6.1): the Linux list is a floor.
        linux = torch_knowledge.arch_list(minor, variant, "linux-x86_64")
        if linux is not None:
            return linux, "Windows wheel assumed to carry at least the Linux architecture list"
    return None, None


def _with_mode(request: Request, static: Candidate) -> Candidate:
    """A wheel's needs (the same for every driver) judged against the driver asked about."""
    build = Version.parse(static.cuda) if static.cuda else None
    return replace(static, mode=mode_for(request, build, static.full_min, static.compat_min))


@functools.cache
def _evaluate(
    minor: str,
    variant: str,
    cuda: str | None,
    status: str,
    source: str,
    capabilities: tuple[str, ...],
    gpu_floor: Version | None,
    platform: str,
) -> Candidate:
    """What a wheel needs and whether it runs the GPUs: the same for every driver asked about."""
    windows = platform.startswith("windows")
    notes: list[str] = []
    sources = [source]
    ptx_only = False
    if variant == "cpu":
        runs = not capabilities
        if capabilities:
            notes.append("a CPU-only wheel cannot use the GPUs")
        return Candidate(minor, variant, None, status, runs, tuple(notes), None, None, "full")
    entry, assumption = _arch_entry(minor, variant, platform)
    if entry is None:
        runs = not capabilities and not platform.startswith("macos")
        if capabilities:
            notes.append(f"no architecture list recorded for torch {minor} {variant} on {platform}")
    else:
        assert isinstance(entry, torch_knowledge.ArchList)
        sources.append(entry.source)
        if assumption:
            notes.append(assumption)
        runs = True
        for capability in capabilities:
            if not entry.supports(capability):
                runs = False
                notes.append(
                    f"torch {minor} {variant} has no kernels for compute capability {capability}"
                )
            elif not _has_cubin(entry, capability):
                ptx_only = True
    requirement, linux_for_windows = (
        cuda_knowledge.driver_requirement_for(cuda, windows) if cuda else (None, False)
    )
    if linux_for_windows:
        notes.append(f"no Windows driver minimum for CUDA {cuda} in the table: the Linux one used")
    full_min = requirement.full_support if requirement else None
    compat_min = None
    build = Version.parse(cuda) if cuda else None
    # Minor-version compatibility cannot JIT PTX from a newer minor, so a GPU that only has PTX
    # in this wheel needs the full minimum.
    if (
        requirement
        and requirement.minor_compat_floor
        and build
        and not ptx_only
        and requirement.minor_compat_floor < requirement.full_support
    ):
        compat_min = requirement.minor_compat_floor
    if gpu_floor is not None:
        full_min = max(full_min, gpu_floor) if full_min else gpu_floor
        compat_min = max(compat_min, gpu_floor) if compat_min else None
    if requirement:
        sources.append(requirement.full_support_source)
    return Candidate(
        minor,
        variant,
        cuda,
        status,
        runs,
        tuple(notes),
        full_min,
        compat_min,
        "unknown",
        ptx_only,
        tuple(sources),
    )


def _has_cubin(entry: torch_knowledge.ArchList, capability: str) -> bool:
    wanted = Version.parse(capability)
    for have_text in entry.compute_capabilities:
        have = Version.parse(have_text)
        if wanted and have and have.major == wanted.major and have.minor <= wanted.minor:
            return True
    return False


def mode_for(
    request: Request, build: Version | None, full_min: Version | None, compat_min: Version | None
) -> DriverMode:
    driver = Version.parse(request.driver_version) if request.driver_version else None
    if driver is not None:
        if full_min is None:
            return "unknown"
        if driver >= full_min:
            return "full"
        if request.allow_minor_compat and compat_min is not None and driver >= compat_min:
            return "minor_compat"
        return "too_old"
    supported = Version.parse(request.driver_cuda) if request.driver_cuda else None
    if supported is not None and build is not None:
        if supported.truncated(2) >= build.truncated(2):
            return "full"
        if request.allow_minor_compat and supported.major == build.major >= 11:
            return "minor_compat"
        return "too_old"
    return "unknown"


def candidates(request: Request, capabilities: tuple[str, ...], platform: str) -> list[Candidate]:
    floor, _ = gpu_floor(capabilities, platform.startswith("windows"))
    result = []
    for minor in torch_knowledge.releases():
        if platform.startswith("macos"):
            variants: list[tuple[str, str | None, str, str]] = []
        else:
            variants = [
                (v.cuda_variant, v.cuda_version, v.status, v.source)
                for v in _variants_by_minor().get(minor, ())
                if request.torch_version is None
                or minor_of(request.torch_version) != minor
                or v.shipped_in(request.torch_version)
            ]
        variants.append(("cpu", None, "stable", "https://download.pytorch.org/whl/cpu"))
        for variant, cuda, status, source in variants:
            static = _evaluate(minor, variant, cuda, status, source, capabilities, floor, platform)
            result.append(static if variant == "cpu" else _with_mode(request, static))
    return result


@functools.cache
def _variants_by_minor() -> dict[str, tuple[torch_knowledge.CudaVariant, ...]]:
    index: dict[str, list[torch_knowledge.CudaVariant]] = {}
    for variant in torch_knowledge.cuda_variants():
        index.setdefault(variant.torch_version, []).append(variant)
    return {minor: tuple(found) for minor, found in index.items()}

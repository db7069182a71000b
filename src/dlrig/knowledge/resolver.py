"""One answer to "which torch, which wheel index, which driver?" for every install command.

`resolve(Request(...))` reads only the knowledge tables: the CUDA wheel variants each torch
release shipped (`pytorch_cuda_variants.csv`), the architectures each wheel carries
(`pytorch_arch_lists.csv`), NVIDIA's driver minimums (`cuda_driver_minimum.csv`, Table 3) and
minor-version compatibility floors (`cuda_minor_compat.csv`), the torchvision/torchaudio pairs
(`torch_companions.csv`), the driver branches (`driver_branches.csv`) and how pip reaches a
release's wheels (`pytorch_install_commands.csv`). doctor, diagnose and provision all call it,
so a fix printed anywhere names a wheel, an index and a driver that exist together.

    from dlrig.knowledge.resolver import Request, resolve
    answer = resolve(Request(compute_capabilities=("12.0",), driver_version="570.86.15"))
    answer.install.pip_command()   # torch 2.11 from the cu128 index: runs on driver 570
    answer.alternatives[0]         # torch 2.14 cu130 after upgrading the driver to >= 580.65.06
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field, replace

from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge import pytorch as torch_knowledge
from dlrig.knowledge.driver_choice import (
    DriverUpgrade,
    driver_upgrade_for,
    recommended_branch_driver,
)
from dlrig.knowledge.install_commands import Install, install_for, normalise_platform
from dlrig.knowledge.versions import Version, minor_of, release

__all__ = [
    "DriverUpgrade",
    "Install",
    "Option",
    "Request",
    "Resolution",
    "resolve",
]


@dataclass(frozen=True)
class Request:
    """What the machine has and what the user has or wants.

    Every field is optional. `driver_version=None` means "any driver: choose one".
    `torch_version` is kept when a wheel of that release fits; with `torch_exact` nothing else
    is offered. `cuda_variant` ("cu121", "cpu") is a hard requirement.
    """

    compute_capabilities: tuple[str, ...] = ()  # ("8.6", "12.0")
    gpu_ids: tuple[str, ...] = ()  # catalogue ids or aliases ("rtx-5090", "A100")
    driver_version: str | None = None  # "570.86.15"
    driver_cuda: str | None = None  # nvidia-smi's "CUDA Version", when the version is unknown
    platform: str = "linux-x86_64"  # linux-x86_64 | linux-aarch64 | windows-x86_64 | macos-arm64
    torch_version: str | None = None  # "2.5.1", "2.5" or "2.5.1+cu121" (the local part is ignored)
    torch_exact: bool = False
    cuda_variant: str | None = None
    keep_driver: bool = True  # prefer what runs on this driver over a newer torch
    allow_minor_compat: bool = True  # accept CUDA minor-version compatibility (same major)
    torchvision: bool = True
    torchaudio: bool = True
    today: dt.date | None = None  # for driver-branch end of life; None = today
    need_cuda: bool = False  # a CUDA wheel even when no GPU or driver is named (a CUDA setup)


@dataclass(frozen=True)
class Option:
    """An install, and the driver upgrade it needs first (None: the driver already runs it)."""

    install: Install
    driver_upgrade: DriverUpgrade | None = None


@dataclass(frozen=True)
class Resolution:
    request: Request
    install: Install | None  # the set that works (after `driver_upgrade`, when that is set)
    driver_upgrade: DriverUpgrade | None = None  # needed before `install` works
    alternatives: tuple[Option, ...] = ()  # e.g. a newer torch after a driver upgrade
    problems: tuple[str, ...] = ()  # why what was asked for cannot exist ("no wheel exists")
    reasons: tuple[str, ...] = ()  # how the answer was chosen, with the table facts
    capabilities: tuple[str, ...] = ()  # the compute capabilities resolved from the request

    @property
    def ok(self) -> bool:
        """An install exists that runs on the driver as it is."""
        return self.install is not None and self.driver_upgrade is None

    def fix_text(self, force_reinstall: bool = True) -> str:
        """The fix to print: the commands, then the alternative (one line each)."""
        lines: list[str] = []
        if self.install is None:
            lines.extend(self.problems or ("no published PyTorch wheel fits this machine",))
            return "\n".join(lines)
        if self.driver_upgrade is not None:
            lines.append(self.driver_upgrade.text())
            lines.append("then: " + self.install.pip_command(force_reinstall=force_reinstall))
        else:
            lines.append(self.install.pip_command(force_reinstall=force_reinstall))
        for option in self.alternatives:
            if option.driver_upgrade is not None:
                lines.append(
                    f"or, for torch {option.install.torch_minor} ({option.install.cuda_variant}): "
                    f"{option.driver_upgrade.text()}; then "
                    + option.install.pip_command(force_reinstall=force_reinstall)
                )
            else:
                lines.append("or: " + option.install.pip_command(force_reinstall=force_reinstall))
        return "\n".join(lines)


@dataclass(frozen=True)
class _Candidate:
    minor: str
    variant: str
    cuda: str | None
    status: str
    runs_gpus: bool
    gpu_notes: tuple[str, ...]
    full_min: Version | None  # driver for full support (Table 3, and the GPU's own floor)
    compat_min: Version | None  # driver for minor-version compatibility, when it applies
    mode: str  # full | minor_compat | too_old | unknown (the driver given, or none given)
    ptx_only: bool = False
    sources: tuple[str, ...] = field(default_factory=tuple)


def _capabilities(request: Request) -> tuple[tuple[str, ...], list[str]]:
    problems = []
    found = [c.strip() for c in request.compute_capabilities if c and c.strip()]
    if request.gpu_ids:
        from dlrig.knowledge import gpus

        for gpu_id in request.gpu_ids:
            spec = gpus.catalogue().resolve(gpu_id)
            if spec is None or not spec.compute_capability:
                problems.append(f"GPU {gpu_id!r} is not in the catalogue")
                continue
            found.append(spec.compute_capability)
    unique = tuple(sorted(set(found), key=lambda c: Version.parse(c) or Version((0,))))
    return unique, problems


def _gpu_floor(capabilities: tuple[str, ...], windows: bool) -> tuple[Version | None, list[str]]:
    """The driver every GPU needs at least: that of the first CUDA release that knows it."""
    floor: Version | None = None
    notes = []
    for capability in capabilities:
        first = cuda_knowledge.first_cuda_for(capability)
        if first is None:
            continue
        requirement = cuda_knowledge.driver_requirement(str(first.truncated(2)), windows=windows)
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


def _candidate(
    request: Request,
    minor: str,
    variant: str,
    cuda: str | None,
    status: str,
    source: str,
    capabilities: tuple[str, ...],
    gpu_floor: Version | None,
    platform: str,
) -> _Candidate:
    static = _evaluate(minor, variant, cuda, status, source, capabilities, gpu_floor, platform)
    if variant == "cpu":
        return static
    build = Version.parse(cuda) if cuda else None
    return replace(static, mode=_mode(request, build, static.full_min, static.compat_min))


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
) -> _Candidate:
    """What a wheel needs and whether it runs the GPUs: the same for every driver asked about."""
    windows = platform.startswith("windows")
    notes: list[str] = []
    sources = [source]
    ptx_only = False
    if variant == "cpu":
        runs = not capabilities
        if capabilities:
            notes.append("a CPU-only wheel cannot use the GPUs")
        return _Candidate(minor, variant, None, status, runs, tuple(notes), None, None, "full")
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
    requirement = cuda_knowledge.driver_requirement(cuda, windows=windows) if cuda else None
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
    return _Candidate(
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


def _mode(
    request: Request, build: Version | None, full_min: Version | None, compat_min: Version | None
) -> str:
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


def _candidates(request: Request, capabilities: tuple[str, ...], platform: str) -> list[_Candidate]:
    gpu_floor, _ = _gpu_floor(capabilities, platform.startswith("windows"))
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
            result.append(
                _candidate(
                    request,
                    minor,
                    variant,
                    cuda,
                    status,
                    source,
                    capabilities,
                    gpu_floor,
                    platform,
                )
            )
    return result


@functools.cache
def _variants_by_minor() -> dict[str, tuple[torch_knowledge.CudaVariant, ...]]:
    index: dict[str, list[torch_knowledge.CudaVariant]] = {}
    for variant in torch_knowledge.cuda_variants():
        index.setdefault(variant.torch_version, []).append(variant)
    return {minor: tuple(found) for minor, found in index.items()}


def _rank(candidate: _Candidate, preferred_minor: str | None) -> tuple[object, ...]:
    release_version = Version.parse(candidate.minor) or Version((0,))
    cuda = Version.parse(candidate.cuda) if candidate.cuda else Version((0,))
    return (
        candidate.minor == preferred_minor,
        release_version,
        candidate.mode == "full",
        candidate.status == "stable",
        cuda,
    )


def _recommended_driver(request: Request, windows: bool) -> Version | None:
    """With no driver given: the newest published minimum on a supported long-term branch."""
    return recommended_branch_driver(request.today or dt.date.today(), windows)


def resolve(request: Request) -> Resolution:
    """The torch, wheel index, companions and driver that work together for this request."""
    platform = normalise_platform(request.platform)
    windows = platform.startswith("windows")
    capabilities, problems = _capabilities(request)
    reasons: list[str] = []
    _, floor_notes = _gpu_floor(capabilities, windows)
    reasons.extend(floor_notes)
    wanted_minor = minor_of(request.torch_version) if request.torch_version else None
    variant = (request.cuda_variant or "").strip().lower() or None
    if wanted_minor and wanted_minor not in torch_knowledge.releases():
        known = torch_knowledge.releases()
        problems.append(
            f"torch {request.torch_version} is not in dlrig's release table "
            f"(it knows {known[0]}-{known[-1]})"
        )
        if request.torch_exact:
            return Resolution(request, None, problems=tuple(problems), capabilities=capabilities)
        wanted_minor = None
    if wanted_minor and variant and variant != "cpu":
        shipped = torch_knowledge.variants_of(request.torch_version or wanted_minor)
        if variant not in {v.cuda_variant for v in shipped}:
            names = ", ".join(v.cuda_variant for v in shipped) or "no CUDA wheels"
            problems.append(
                f"no wheel exists: torch {release(request.torch_version)} shipped {names}; "
                f"never {variant}"
            )
            return Resolution(request, None, problems=tuple(problems), capabilities=capabilities)
    pool = _candidates(request, capabilities, platform)
    if variant:
        pool = [c for c in pool if c.variant == variant]
        if not pool:
            problems.append(f"no torch release in the tables shipped a {variant} wheel")
            return Resolution(request, None, problems=tuple(problems), capabilities=capabilities)
    if request.torch_exact and wanted_minor:
        pool = [c for c in pool if c.minor == wanted_minor]
    # A CPU wheel only when asked for, or when there is no GPU to use.
    if variant != "cpu" and (
        capabilities or request.driver_version or request.driver_cuda or request.need_cuda
    ):
        pool = [c for c in pool if c.variant != "cpu"]
    runnable = [c for c in pool if c.runs_gpus]
    if not runnable:
        problems.extend(_why_nothing_runs(pool, capabilities, wanted_minor))
        return Resolution(
            request,
            None,
            problems=tuple(problems),
            reasons=tuple(reasons),
            capabilities=capabilities,
        )
    driver_given = bool(request.driver_version or request.driver_cuda)
    if not driver_given:
        runnable = _fit_recommended_driver(request, runnable, windows, reasons)
    working = [c for c in runnable if c.mode in ("full", "minor_compat")] if driver_given else []
    preferred = wanted_minor
    if driver_given and request.keep_driver and working:
        best = max(working, key=lambda c: _rank(c, preferred))
        upgrade = None
    else:
        # The driver has to change (or may): aim at what the long-term branch runs in full.
        pool_for_upgrade = (
            _fit_recommended_driver(request, runnable, windows, reasons)
            if driver_given
            else runnable
        )
        best = max(pool_for_upgrade, key=lambda c: _rank(c, preferred))
        upgrade = (
            driver_upgrade_for(best.full_min, request, windows)
            if driver_given and best.mode not in ("full", "minor_compat")
            else None
        )
    install = install_for(
        request,
        best.minor,
        best.variant,
        best.cuda,
        best.status,
        platform,
        best.full_min,
        best.compat_min,
        best.mode,
        best.sources,
    )
    reasons.extend(_explain(best, request, wanted_minor))
    reasons.extend(best.gpu_notes)
    alternatives = _alternatives(request, runnable, best, platform, windows, preferred)
    if wanted_minor and best.minor != wanted_minor:
        problems.extend(_why_not_wanted(pool, wanted_minor, capabilities))
    return Resolution(
        request, install, upgrade, alternatives, tuple(problems), tuple(reasons), capabilities
    )


def _fit_recommended_driver(
    request: Request, runnable: list[_Candidate], windows: bool, reasons: list[str]
) -> list[_Candidate]:
    """No driver given: prefer wheels the current long-term driver branch runs in full."""
    recommended = _recommended_driver(request, windows)
    if recommended is None:
        return runnable
    fitting = [c for c in runnable if c.full_min is None or c.full_min <= recommended]
    if fitting and len(fitting) < len(runnable):
        reasons.append(
            f"no driver given: chose among wheels that the long-term driver {recommended} runs "
            "in full"
        )
    return fitting or runnable


def _explain(best: _Candidate, request: Request, wanted_minor: str | None) -> list[str]:
    lines = []
    if wanted_minor and best.minor == wanted_minor:
        lines.append(f"kept torch {wanted_minor}, which has a {best.variant} wheel")
    if best.cuda and best.full_min:
        lines.append(
            f"{best.variant} is CUDA {best.cuda}: full support from driver {best.full_min}"
            + (
                f", minor-version compatibility from {best.compat_min}"
                if best.compat_min and best.compat_min < best.full_min
                else ""
            )
        )
    if request.driver_version and best.mode == "minor_compat":
        lines.append(
            f"driver {request.driver_version} runs it through minor-version compatibility "
            "(PTX of a newer CUDA minor cannot be JIT-compiled)"
        )
    return lines


def _why_nothing_runs(
    pool: list[_Candidate], capabilities: tuple[str, ...], wanted_minor: str | None
) -> list[str]:
    if not pool:
        return ["no wheel in the tables matches the request"]
    caps = ", ".join(capabilities) or "this GPU"
    if wanted_minor:
        return [f"no torch {wanted_minor} wheel has kernels for compute capability {caps}"]
    oldest = min(
        (Version.parse(c) for e in torch_knowledge.arch_lists() for c in e.compute_capabilities),
        key=lambda v: v or Version((99,)),
        default=None,
    )
    return [
        f"no published PyTorch wheel has kernels for compute capability {caps} (the oldest "
        f"architecture any wheel in the tables carries is {oldest}): build PyTorch from source "
        "for it, use the CPU build, or use another GPU"
    ]


def _why_not_wanted(
    pool: list[_Candidate], wanted_minor: str, capabilities: tuple[str, ...]
) -> list[str]:
    same = [c for c in pool if c.minor == wanted_minor]
    if same and not any(c.runs_gpus for c in same):
        caps = ", ".join(capabilities)
        wanted = Version.parse(wanted_minor) or Version((0,))
        later = sorted(
            (c for c in pool if c.runs_gpus and (Version.parse(c.minor) or Version((0,))) > wanted),
            key=lambda c: Version.parse(c.minor) or Version((0,)),
        )
        first = (
            f"; the first later release that has them: {later[0].minor} ({later[0].variant})"
            if later
            else ""
        )
        return [f"no torch {wanted_minor} wheel has kernels for compute capability {caps}{first}"]
    return []


def _alternatives(
    request: Request,
    runnable: list[_Candidate],
    best: _Candidate,
    platform: str,
    windows: bool,
    preferred: str | None,
) -> tuple[Option, ...]:
    """The newest release overall, when it is not the answer (it may need a newer driver).

    Of its wheels, the one the current long-term driver branch runs in full: the smallest
    driver change that reaches it, not the newest CUDA for its own sake.
    """
    newest_minor = max(runnable, key=lambda c: _rank(c, None)).minor
    if (Version.parse(newest_minor) or Version((0,))) <= (
        Version.parse(best.minor) or Version((0,))
    ):
        return ()
    same = [c for c in runnable if c.minor == newest_minor]
    driver_given = bool(request.driver_version or request.driver_cuda)
    working = [c for c in same if c.mode in ("full", "minor_compat")] if driver_given else []
    if working:
        newest = max(working, key=lambda c: _rank(c, None))
    else:
        newest = max(
            _fit_recommended_driver(request, same, windows, []), key=lambda c: _rank(c, None)
        )
    upgrade = (
        driver_upgrade_for(newest.full_min, request, windows)
        if driver_given and newest.mode not in ("full", "minor_compat")
        else None
    )
    install = install_for(
        replace(request, torch_version=None),
        newest.minor,
        newest.variant,
        newest.cuda,
        newest.status,
        platform,
        newest.full_min,
        newest.compat_min,
        newest.mode,
        newest.sources,
    )
    return (Option(install, upgrade),)

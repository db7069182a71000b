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
from dataclasses import dataclass, replace

from dlrig.knowledge import pytorch as torch_knowledge
from dlrig.knowledge.driver_choice import (
    DriverUpgrade,
    driver_upgrade_for,
    recommended_branch_driver,
)
from dlrig.knowledge.install_commands import Install, install_for, normalise_platform
from dlrig.knowledge.versions import Version, minor_of, release
from dlrig.knowledge.wheel_fit import Candidate, candidates, capabilities_of, gpu_floor

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
    # The GPU runs on a Windows driver although the wheels are Linux ones (WSL2): Windows driver
    # minimums and downloads, `platform`'s wheels.
    windows_driver: bool = False


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


def _rank(candidate: Candidate, preferred_minor: str | None) -> tuple[object, ...]:
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
    windows = platform.startswith("windows") or request.windows_driver
    capabilities, problems = capabilities_of(request)
    reasons: list[str] = []
    _, floor_notes = gpu_floor(capabilities, windows)
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
    pool = candidates(request, capabilities, platform)
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
    request: Request, runnable: list[Candidate], windows: bool, reasons: list[str]
) -> list[Candidate]:
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


def _explain(best: Candidate, request: Request, wanted_minor: str | None) -> list[str]:
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
    pool: list[Candidate], capabilities: tuple[str, ...], wanted_minor: str | None
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
    pool: list[Candidate], wanted_minor: str, capabilities: tuple[str, ...]
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
    runnable: list[Candidate],
    best: Candidate,
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

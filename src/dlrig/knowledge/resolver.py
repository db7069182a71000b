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
from dataclasses import dataclass

from dlrig.knowledge import architectures as arch_knowledge
from dlrig.knowledge import pytorch as torch_knowledge
from dlrig.knowledge.driver_choice import (
    DriverLimit,
    DriverUpgrade,
    driver_limit_for,
)
from dlrig.knowledge.install_commands import Install, install_for, normalise_platform
from dlrig.knowledge.resolver_choice import (
    Option,
    alternatives_for,
    explain,
    fit_recommended_driver,
    in_full,
    is_reachable,
    rank,
    upgrade_to,
    why_not_wanted,
    why_nothing_runs,
)
from dlrig.knowledge.versions import Version, minor_of, release
from dlrig.knowledge.wheel_fit import candidates, capabilities_of, gpu_floor

__all__ = [
    "DriverLimit",
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
    # For the driver package a fix names: the OS ("Ubuntu 22.04.3 LTS"; None = unknown) and the
    # GPU names as the driver reports them (Ubuntu's desktop or server driver series).
    os_name: str | None = None
    gpu_names: tuple[str, ...] = ()


@dataclass(frozen=True)
class Resolution:
    request: Request
    install: Install | None  # the set that works (after `driver_upgrade`, when that is set)
    driver_upgrade: DriverUpgrade | None = None  # needed before `install` works
    alternatives: tuple[Option, ...] = ()  # e.g. a newer torch after a driver upgrade
    problems: tuple[str, ...] = ()  # why what was asked for cannot exist ("no wheel exists")
    reasons: tuple[str, ...] = ()  # how the answer was chosen, with the table facts
    capabilities: tuple[str, ...] = ()  # the compute capabilities resolved from the request
    # Set when what was asked needs a driver past the last branch that supports the GPUs.
    driver_limit: DriverLimit | None = None

    @property
    def ok(self) -> bool:
        """An install exists that runs on the driver as it is."""
        return self.install is not None and self.driver_upgrade is None

    def fix_text(self, force_reinstall: bool = True) -> str:
        """The fix to print: the commands, then the alternative (one line each)."""
        lines: list[str] = []
        if self.install is None:
            if self.driver_limit is not None:
                lines.append(self.driver_limit.text())
            lines.extend(self.problems or ("no published PyTorch wheel fits this machine",))
            return "\n".join(lines)
        pip = self.install.pip_command(force_reinstall=force_reinstall) + _driver_note(
            self.install, self.request
        )
        if self.driver_upgrade is not None:
            lines.append(self.driver_upgrade.text())
            lines.append("then: " + pip)
        else:
            lines.append(pip)
        for option in self.alternatives:
            command = option.install.pip_command(force_reinstall=force_reinstall)
            if option.driver_upgrade is not None:
                lines.append(
                    f"or, for torch {option.install.torch_minor} ({option.install.cuda_variant}): "
                    f"{option.driver_upgrade.text()}"
                )
                lines.append("  then: " + command)
            elif option.condition:
                lines.append(f"or, {option.condition}: {command}")
            else:
                lines.append("or: " + command + _driver_note(option.install, self.request))
        return "\n".join(lines)


def _driver_note(install: Install, request: Request) -> str:
    """With no driver known, the pip line says which driver its wheel needs (a shell comment)."""
    if install.driver_mode != "unknown" or not install.min_driver or install.cuda_variant == "cpu":
        return ""
    if request.driver_version or request.driver_cuda:
        return ""
    limit = arch_knowledge.driver_limit(capabilities_of(request)[0])
    full = Version.parse(install.min_driver)
    if limit and limit.last_branch and full and full.major > limit.last_branch:
        # Past the GPUs' last branch: only minor-version compatibility reaches this wheel.
        return (
            f"   # needs NVIDIA driver ≥ {install.min_driver_compat} (minor-version "
            f"compatibility: {limit.label} GPUs end at R{limit.last_branch}): check with nvidia-smi"
        )
    return f"   # needs NVIDIA driver ≥ {install.min_driver}: check with nvidia-smi"


def _unresolved(
    request: Request,
    problems: list[str],
    capabilities: tuple[str, ...],
    reasons: list[str] | None = None,
    driver_limit: DriverLimit | None = None,
) -> Resolution:
    """The answer when no install fits: what stands in the way, and how far the search got."""
    return Resolution(
        request,
        None,
        problems=tuple(problems),
        reasons=tuple(reasons or ()),
        capabilities=capabilities,
        driver_limit=driver_limit,
    )


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
            return _unresolved(request, problems, capabilities)
        wanted_minor = None
    if wanted_minor and variant and variant != "cpu":
        shipped = torch_knowledge.variants_of(request.torch_version or wanted_minor)
        if variant not in {v.cuda_variant for v in shipped}:
            names = ", ".join(v.cuda_variant for v in shipped) or "no CUDA wheels"
            problems.append(
                f"no wheel exists: torch {release(request.torch_version)} shipped {names}; "
                f"never {variant}"
            )
            return _unresolved(request, problems, capabilities)
    pool = candidates(request, capabilities, platform)
    if variant:
        pool = [c for c in pool if c.variant == variant]
        if not pool:
            problems.append(f"no torch release in the tables shipped a {variant} wheel")
            return _unresolved(request, problems, capabilities)
    if request.torch_exact and wanted_minor:
        pool = [c for c in pool if c.minor == wanted_minor]
    # A CPU wheel only when asked for, or when there is no GPU to use.
    if variant != "cpu" and (
        capabilities or request.driver_version or request.driver_cuda or request.need_cuda
    ):
        pool = [c for c in pool if c.variant != "cpu"]
    runnable = [c for c in pool if c.runs_gpus]
    if not runnable:
        problems.extend(why_nothing_runs(pool, capabilities, wanted_minor))
        return _unresolved(request, problems, capabilities, reasons)
    driver_given = bool(request.driver_version or request.driver_cuda)
    limit = arch_knowledge.driver_limit(capabilities)
    cap = limit.last_branch if limit else None
    working = [c for c in runnable if c.mode in ("full", "minor_compat")] if driver_given else []
    # What a driver upgrade can reach: nothing past the GPUs' last branch (a Kepler GPU ends
    # at R470, whatever a newer wheel wants).
    reachable = [c for c in runnable if is_reachable(c, cap, windows, request)]
    if limit is not None and len(reachable) < len(runnable):
        reasons.append(
            f"{limit.label} GPUs end at driver branch R{cap}: wheels that need a newer driver "
            "were left out"
        )
    if not working and not reachable:
        driver_limit = driver_limit_for(
            min((c.full_min for c in runnable if c.full_min), default=None), request, windows
        )
        problems.append(
            "every wheel with kernels for this GPU needs a newer driver than its last branch"
        )
        return _unresolved(request, problems, capabilities, reasons, driver_limit)
    if not driver_given:
        reachable = fit_recommended_driver(request, reachable, windows, reasons, cap)
    preferred = wanted_minor
    if driver_given and request.keep_driver and working:
        best = max(working, key=lambda c: rank(c, preferred))
        upgrade = None
    else:
        # The driver has to change (or may): aim at what the long-term branch runs in full.
        pool_for_upgrade = (
            fit_recommended_driver(request, reachable, windows, reasons, cap)
            if driver_given
            else reachable
        )
        best = max(
            pool_for_upgrade,
            key=lambda c: (c.minor == preferred, in_full(c, cap, windows), *rank(c, preferred)),
        )
        upgrade = (
            upgrade_to(best, request, windows, cap)
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
    reasons.extend(explain(best, request, wanted_minor))
    reasons.extend(best.gpu_notes)
    alternatives = alternatives_for(request, reachable or working, best, platform, windows, cap)
    if wanted_minor and best.minor != wanted_minor:
        problems.extend(why_not_wanted(pool, wanted_minor, capabilities, limit, windows))
    return Resolution(
        request, install, upgrade, alternatives, tuple(problems), tuple(reasons), capabilities
    )

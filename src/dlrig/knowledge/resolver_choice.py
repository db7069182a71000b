"""How the resolver chooses among candidate wheels: ranking, what a driver upgrade can reach
(never past the GPUs' last branch), the alternatives it offers and the reasons it gives."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dlrig.knowledge import architectures as arch_knowledge
from dlrig.knowledge import pytorch as torch_knowledge
from dlrig.knowledge.driver_choice import (
    DriverUpgrade,
    branch_major,
    driver_upgrade_for,
    recommended_branch_driver,
)
from dlrig.knowledge.install_commands import Install, install_for
from dlrig.knowledge.versions import Version, minor_of
from dlrig.knowledge.wheel_fit import Candidate

if TYPE_CHECKING:
    from dlrig.knowledge.resolver import Request


@dataclass(frozen=True)
class Option:
    """An install, and the driver upgrade it needs first (None: the driver already runs it)."""

    install: Install
    driver_upgrade: DriverUpgrade | None = None
    condition: str | None = None  # when this option is the one: "on a driver older than R580"


def rank(candidate: Candidate, preferred_minor: str | None) -> tuple[object, ...]:
    release_version = Version.parse(candidate.minor) or Version((0,))
    cuda = Version.parse(candidate.cuda) if candidate.cuda else Version((0,))
    return (
        candidate.minor == preferred_minor,
        release_version,
        candidate.mode == "full",
        candidate.status == "stable",
        cuda,
    )


def in_full(candidate: Candidate, cap: int | None, windows: bool) -> bool:
    """A driver the GPUs can take (up to their last branch `cap`) runs this wheel in full."""
    full = candidate.full_min
    return cap is None or full is None or branch_major(full, windows) <= cap


def upgrade_to(
    candidate: Candidate, request: Request, windows: bool, cap: int | None
) -> DriverUpgrade | None:
    """The driver upgrade this wheel needs: full support, or minor-version compatibility when
    full support lies past the GPUs' last branch."""
    if in_full(candidate, cap, windows):
        return driver_upgrade_for(candidate.full_min, request, windows)
    return driver_upgrade_for(candidate.compat_min, request, windows, through_compat=True)


def is_reachable(
    candidate: Candidate, cap: int | None, windows: bool, request: Request | None
) -> bool:
    """It runs on the driver already, or on one the GPUs can take: in full, or through
    minor-version compatibility when the request accepts it."""
    if candidate.mode in ("full", "minor_compat") or in_full(candidate, cap, windows):
        return True
    compat = candidate.compat_min
    allowed = request is None or request.allow_minor_compat
    return bool(allowed and compat is not None and cap and branch_major(compat, windows) <= cap)


def fit_recommended_driver(
    request: Request,
    runnable: list[Candidate],
    windows: bool,
    reasons: list[str],
    cap: int | None = None,
) -> list[Candidate]:
    """No driver given: prefer wheels the current long-term driver branch (or the GPUs' last
    branch, when it ended before) runs in full."""
    recommended = recommended_branch_driver(request.today or dt.date.today(), windows, cap)
    if recommended is None:
        return runnable
    fitting = [c for c in runnable if c.full_min is None or c.full_min <= recommended]
    if fitting and len(fitting) < len(runnable):
        reasons.append(
            f"no driver given: chose among wheels that the long-term driver {recommended} runs "
            "in full"
        )
    return fitting or runnable


def explain(best: Candidate, request: Request, wanted_minor: str | None) -> list[str]:
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


def why_nothing_runs(
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


def why_not_wanted(
    pool: list[Candidate],
    wanted_minor: str,
    capabilities: tuple[str, ...],
    limit: arch_knowledge.Architecture | None,
    windows: bool,
) -> list[str]:
    same = [c for c in pool if c.minor == wanted_minor]
    caps = ", ".join(capabilities)
    if same and not any(c.runs_gpus for c in same):
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
    cap = limit.last_branch if limit else None
    if limit is not None and same and not any(is_reachable(c, cap, windows, None) for c in same):
        return [
            f"torch {wanted_minor} wheels for compute capability {caps} need a driver newer "
            f"than R{cap}, the last branch for {limit.label} GPUs"
        ]
    return []


def alternatives_for(
    request: Request,
    runnable: list[Candidate],
    best: Candidate,
    platform: str,
    windows: bool,
    cap: int | None,
) -> tuple[Option, ...]:
    """The newest release overall, when it is not the answer (it may need a newer driver);
    with no driver known, also the best wheel for a driver older than the answer's branch.

    Of the newest release's wheels, the one the current long-term driver branch runs in full:
    the smallest driver change that reaches it, not the newest CUDA for its own sake.
    """
    options: list[Option] = []
    newest_minor = max(runnable, key=lambda c: rank(c, None)).minor
    if (Version.parse(newest_minor) or Version((0,))) > (
        Version.parse(best.minor) or Version((0,))
    ):
        same = [c for c in runnable if c.minor == newest_minor]
        driver_given = bool(request.driver_version or request.driver_cuda)
        working = [c for c in same if c.mode in ("full", "minor_compat")] if driver_given else []
        if working:
            newest = max(working, key=lambda c: rank(c, None))
        else:
            newest = max(
                fit_recommended_driver(request, same, windows, [], cap),
                key=lambda c: rank(c, None),
            )
        upgrade = (
            upgrade_to(newest, request, windows, cap)
            if driver_given and newest.mode not in ("full", "minor_compat")
            else None
        )
        options.append(Option(_install(request, newest, platform, keep=False), upgrade))
    older = _older_driver_option(request, runnable, best, platform, windows)
    if older is not None:
        options.append(older)
    return tuple(options)


def _older_driver_option(
    request: Request, runnable: list[Candidate], best: Candidate, platform: str, windows: bool
) -> Option | None:
    """No driver known: the wheel to use when the driver turns out older than the answer's
    branch (an RTX 5090 on R570 cannot run cu130 wheels, but runs cu128 ones)."""
    if request.driver_version or request.driver_cuda or best.full_min is None:
        return None
    if best.variant == "cpu":
        return None
    branch = branch_major(best.full_min, windows)
    older = [
        c
        for c in runnable
        if c.variant != "cpu"
        and c.full_min is not None
        and branch_major(c.full_min, windows) < branch
    ]
    if not older:
        return None
    chosen = max(older, key=lambda c: rank(c, minor_of(request.torch_version or "") or None))
    assert chosen.full_min is not None
    return Option(
        _install(request, chosen, platform, keep=True),
        condition=f"on a driver older than R{branch} (from {chosen.full_min})",
    )


def _install(request: Request, candidate: Candidate, platform: str, keep: bool) -> Install:
    return install_for(
        request if keep else replace(request, torch_version=None),
        candidate.minor,
        candidate.variant,
        candidate.cuda,
        candidate.status,
        platform,
        candidate.full_min,
        candidate.compat_min,
        candidate.mode,
        candidate.sources,
    )

"""GPU architectures: which compute capabilities belong to each, and the last driver branch
that still supports it.

The last branch bounds every driver fix: a Kepler GPU cannot take a driver newer than R470,
however new a wheel's CUDA wants it. It comes from `provision_driver_policy.csv` (the table
`dlrig provision` installs from) and, for architectures provision never installs a driver for
(Tesla, Fermi), from `gpu_architectures.csv`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from dlrig.knowledge.provision import driver_policies
from dlrig.knowledge.tables import rows
from dlrig.knowledge.versions import Version


@dataclass(frozen=True)
class Architecture:
    name: str  # "kepler", as the GPU catalogue and the provision policy spell it
    capability_min: Version
    capability_max: Version
    last_branch: int | None  # newest driver branch that supports it; None: still supported
    kernel_modules: str | None  # open | proprietary | unsupported (provision policy), None: unknown
    source: str

    @property
    def label(self) -> str:
        return self.name.capitalize()


@functools.cache
def architectures() -> tuple[Architecture, ...]:
    policies = driver_policies()
    result = []
    for row in rows("gpu_architectures"):
        low, high = (
            Version.parse(row["compute_capability_min"]),
            Version.parse(row["compute_capability_max"]),
        )
        if low is None or high is None:
            continue
        policy = policies.get(row["architecture"])
        # The provision policy first: one number for both commands where it has the row.
        branch_text = (policy.last_branch if policy else None) or row["last_branch"]
        result.append(
            Architecture(
                name=row["architecture"],
                capability_min=low,
                capability_max=high,
                last_branch=int(branch_text) if branch_text and branch_text.isdigit() else None,
                kernel_modules=policy.kernel_modules if policy else None,
                source=(policy.source if policy and policy.last_branch else row["source"]),
            )
        )
    return tuple(result)


def architecture_of(capability: str) -> Architecture | None:
    """The architecture of a compute capability ("3.7" -> Kepler); None when unknown."""
    wanted = Version.parse(capability)
    if wanted is None:
        return None
    wanted = wanted.truncated(2)
    for entry in architectures():
        if entry.capability_min.truncated(2) <= wanted <= entry.capability_max.truncated(2):
            return entry
    return None


def of_capabilities(capabilities: tuple[str, ...]) -> tuple[Architecture, ...]:
    """The distinct architectures of these GPUs, in table order (oldest first)."""
    found = {a.name: a for c in capabilities if (a := architecture_of(c)) is not None}
    return tuple(a for a in architectures() if a.name in found)


def driver_limit(capabilities: tuple[str, ...]) -> Architecture | None:
    """Of these GPUs' architectures, the one whose driver support ended first (None: none has)."""
    limited = [a for a in of_capabilities(capabilities) if a.last_branch is not None]
    return min(limited, key=lambda a: a.last_branch or 0) if limited else None

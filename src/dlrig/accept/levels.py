"""Acceptance levels, in the style of DCGM's diagnostic levels (`dcgmi diag -r 1|2|3`).

DCGM's levels trade time for depth: level 1 "quick deployment checks, normally lasting
seconds", level 2 "medium validation, normally lasting approximately two minutes", level 3
"long hardware diagnostics, normally lasting approximately 15 minutes" (dcgmi-diag reference,
docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/dcgmi/dcgmi-diag.html).
dlrig's levels do the same with its own parts: every level runs `doctor` and a burn-in; the
deeper ones run more of `bench` and run it longer, and burn in longer.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlrig.errors import InputError

MIB = 1024**2


@dataclass(frozen=True)
class Level:
    name: str
    description: str
    bench_parts: tuple[str, ...]  # the bench parts this level runs (those that exist)
    bench_quick: bool  # bench's fewer sizes and shorter trials
    storage_bytes: int  # the storage part's test file
    storage_random_seconds: float
    burn_in_minutes: float  # default; --minutes replaces it


LEVELS: dict[str, Level] = {
    "quick": Level(
        "quick",
        "doctor, compute, memory and storage (short), 1-minute burn-in",
        ("compute", "memory", "storage"),
        True,
        256 * MIB,
        2.0,
        1.0,
    ),
    "medium": Level(
        "medium",
        "doctor, every bench part (short), 5-minute burn-in",
        ("compute", "memory", "comms", "storage", "dataloader", "pack"),
        True,
        512 * MIB,
        3.0,
        5.0,
    ),
    "long": Level(
        "long",
        "doctor, every bench part (full), 15-minute burn-in (as DCGM's level 3)",
        ("compute", "memory", "comms", "storage", "dataloader", "pack"),
        False,
        1024 * MIB,
        5.0,
        15.0,
    ),
}


def get(name: str) -> Level:
    try:
        return LEVELS[name]
    except KeyError:
        raise InputError(
            f"--level {name!r} is not a level", fix=f"pick one of: {', '.join(LEVELS)}"
        ) from None

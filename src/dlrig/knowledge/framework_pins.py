"""What TensorFlow's and JAX's GPU wheels ask for: the NVIDIA wheels (CUDA runtime, cuBLAS, cuDNN,
NCCL...) and their versions, read from each wheel's own METADATA (`framework_gpu_pins.csv`).

TensorFlow's `tensorflow[and-cuda]` pins them exactly up to 2.19 and by ranges from 2.20; JAX's
`jax-cuda12-plugin[with-cuda]` and `jax-cuda13-plugin[with-cuda]` give floors. A pip install that
resolved otherwise (another package pinned an older cuDNN, a manual `pip install nvidia-...`)
leaves a framework that cannot load its GPU libraries.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from dlrig.knowledge.tables import records
from dlrig.knowledge.versions import Version

_CLAUSE = re.compile(r"^\s*(===|==|!=|~=|>=|<=|>|<)\s*([\w.*+!-]+)\s*$")


@dataclass(frozen=True)
class Pin:
    framework: str  # tensorflow | jax-cuda12-plugin | jax-cuda13-plugin
    version: str
    extra: str
    requirement: str  # the pip distribution, "nvidia-cudnn-cu12"
    specifier: str  # PEP 440, "==9.3.0.75" or ">=9.3.0.75,<10"
    requires_python: str
    pythons: str  # ";"-separated CPython versions with a Linux x86-64 wheel ("" = none)
    glibc_min: str
    source: str
    as_of: str


@functools.cache
def pins() -> tuple[Pin, ...]:
    return records("framework_gpu_pins", Pin)


def normalise(name: str) -> str:
    """PEP 503 name: "nvidia_cudnn_cu12" and "nvidia-cudnn-cu12" are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins_for(framework: str, version: str) -> tuple[Pin, ...]:
    """The requirements of one release (its exact version, else none)."""
    wanted = Version.parse(version.split("+")[0])
    return tuple(
        p for p in pins() if p.framework == framework and Version.parse(p.version) == wanted
    )


def known_versions(framework: str) -> tuple[str, ...]:
    """The releases in the table, oldest first (by version, not by the file's order)."""
    found = dict.fromkeys(p.version for p in pins() if p.framework == framework)
    return tuple(sorted(found, key=lambda v: Version.parse(v) or Version((0,))))


def _clause(version: Version, op: str, bound_text: str) -> bool:
    if bound_text.endswith(".*"):
        prefix = Version.parse(bound_text[:-2])
        if prefix is None:
            return True
        same = version.parts[: len(prefix.parts)] == prefix.parts
        return same if op == "==" else not same
    bound = Version.parse(bound_text)
    if bound is None:
        return True  # a bound this reader cannot parse is not held against the install
    # PEP 440 compares releases padded with zeros: 9.3.0 == 9.3, 9.3.0 <= 9.3.
    width = max(len(version.parts), len(bound.parts))
    have, limit = version.padded(width), bound.padded(width)
    if op in ("==", "==="):
        return have == limit
    if op == "!=":
        return have != limit
    if op == ">=":
        return have >= limit
    if op == "<=":
        return have <= limit
    if op == ">":
        return have > limit
    if op == "<":
        return have < limit
    # ~=X.Y.Z: >= X.Y.Z and == X.Y.*
    head = bound.truncated(max(1, len(bound.parts) - 1))
    return version >= bound and version.parts[: len(head.parts)] == head.parts


def satisfies(version: str, specifier: str) -> bool:
    """Whether an installed version meets a PEP 440 specifier ("" meets anything)."""
    parsed = Version.parse(version.split("+")[0])
    if parsed is None:
        return True
    # A marker ('; sys_platform == "linux"') says where the pin applies: Linux is what is judged.
    for clause in filter(None, (c.strip() for c in specifier.split(";")[0].split(","))):
        match = _CLAUSE.match(clause)
        if match and not _clause(parsed, match.group(1), match.group(2)):
            return False
    return True

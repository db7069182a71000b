"""Which samples go into which shard, how large a shard is, and the plan an interrupted pack
resumes from.

The plan is a pure function of the source listing, the seed and the number of samples per
shard: shard k holds positions [k·S, (k+1)·S) of the packing order. Packing order is a seeded
shuffle of the listing by default, because an ImageFolder lists samples class by class and a
shard of one class would defeat the shard-level shuffling readers do (LitData's README says
as much: chunk shuffling "is not a substitute" for a shuffled source).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dlrig.knowledge.tables import rows
from dlrig.machine.storage import filesystem_type
from dlrig.outputs import write_text_atomic
from dlrig.pack.format import PLAN, read_json
from dlrig.pack.sources import Source, mean_size_bytes

MIB = 1 << 20
# With no --shard-size, shards are made smaller (down to this) until there are at least two
# per packing process, so every core has work and the last shard does not run alone.
MIN_AUTO_SHARD_BYTES = 32 * MIB
PLAN_VERSION = 1


@functools.cache
def _storage_table() -> tuple[tuple[str, tuple[str, ...], int, str], ...]:
    return tuple(
        (row["storage"], tuple(row["fstypes"].split()), int(row["shard_mib"]) * MIB, row["reason"])
        for row in rows("pack_shard_sizes")
    )


def storage_kind(fstype: str | None) -> str:
    """network | local | memory | unknown, for a filesystem type as /proc/mounts names it."""
    for storage, fstypes, _, _ in _storage_table():
        for pattern in fstypes:
            if fstype == pattern or (
                fstype and pattern.endswith("*") and fstype.startswith(pattern[:-1])
            ):
                return storage
    return "unknown"


@dataclass(frozen=True)
class ShardSize:
    bytes: int
    fstype: str | None
    storage: str
    reason: str  # why this size, for the report


def default_shard_size(target: Path) -> ShardSize:
    """The shard size for the filesystem that will hold `target` (knowledge/pack_shard_sizes)."""
    fstype = filesystem_type(str(target))
    storage = storage_kind(fstype)
    for kind, _, size, reason in _storage_table():
        if kind == storage:
            return ShardSize(size, fstype, storage, reason)
    return ShardSize(256 * MIB, fstype, "unknown", "default")


@dataclass(frozen=True)
class Plan:
    """Everything a resumed pack must agree on with the one it continues."""

    format: str
    source_kind: str
    source_location: str
    fingerprint: str
    total: int
    samples_per_shard: int
    seed: int | None  # None: the source's own order
    skip_bad: bool
    version: int = PLAN_VERSION

    @property
    def shard_count(self) -> int:
        return -(-self.total // self.samples_per_shard)

    @functools.cached_property
    def order(self) -> list[int]:
        order = list(range(self.total))
        if self.seed is not None:
            random.Random(derive_seed(self.seed, "pack-order")).shuffle(order)
        return order

    def members(self, shard: int) -> list[int]:
        """The source positions shard `shard` holds, in the order it holds them."""
        start = shard * self.samples_per_shard
        return self.order[start : start + self.samples_per_shard]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def same_as(self, other: Plan) -> bool:
        return self.to_dict() == other.to_dict()


def derive_seed(*parts: object) -> int:
    """A 64-bit seed from any parts: stable across processes and Python versions."""
    text = "\0".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def make_plan(
    source: Source,
    fmt: str,
    shard_bytes: int | None,
    default: ShardSize,
    jobs: int,
    seed: int | None,
    skip_bad: bool,
) -> tuple[Plan, int, float]:
    """The plan, the shard size it aims at, and the mean sample size it was sized from."""
    mean = max(1.0, mean_size_bytes(source))
    target = shard_bytes or default.bytes
    if shard_bytes is None:
        estimate = mean * len(source)
        target = min(target, max(MIN_AUTO_SHARD_BYTES, int(estimate // (2 * max(1, jobs)))))
    per_shard = max(1, int(target // mean))
    plan = Plan(
        fmt,
        source.kind,
        source.location,
        source.fingerprint(),
        len(source),
        per_shard,
        seed,
        skip_bad,
    )
    return plan, target, mean


def write_plan(dst: Path, plan: Plan) -> None:
    write_text_atomic(dst / PLAN, json.dumps(plan.to_dict(), indent=1) + "\n")


def read_plan(dst: Path) -> Plan | None:
    path = dst / PLAN
    if not path.is_file():
        return None
    try:
        raw = read_json(path)
        return Plan(**{k: raw[k] for k in Plan.__dataclass_fields__})
    except (OSError, ValueError, KeyError, TypeError):
        return None

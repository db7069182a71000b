"""The cache state before each run, set by the parent and checked (dlrig.bench.pack_cache
does the work): page-cold, fully cold, warm; plus what the machine is doing meanwhile."""

from __future__ import annotations

import os
from pathlib import Path

from pack_bench import readers
from pack_bench.writers import listing

# The cold a run gets, as the tables name it.
LABEL = {"cold": "page-cold", "cold-full": "full-cold", "warm": "warm"}
LEGEND = {
    "cold": "pages dropped with posix_fadvise(DONTNEED), mincore <= 1% resident; dentries and "
    "inodes stay cached (the issue's stated method)",
    "cold-full": "sync; echo 3 > /proc/sys/vm/drop_caches (page cache, dentries, inodes), "
    "mincore <= 1% resident, then echo 2 again (the check reopened the files)",
    "warm": "every file read first, mincore >= 99% resident",
}


def data_files(row: readers.Row, work: Path) -> list[str]:
    if row.name == "loose":
        return [p for p, _ in listing(work)]
    where = work / "formats" / row.store
    return sorted(
        str(p)
        for p in where.rglob("*")
        if p.is_file() and p.stat().st_size and p.name != "lock.mdb"
    )


def set_cache(files: list[str], cache: str) -> float:
    from dlrig.bench.pack_cache import set_cache as set_it

    return set_it(files, cache)


def verified(cache: str, resident: float) -> bool:
    return resident <= 0.01 if cache != "warm" else resident >= 0.99


def full_cold_refusal() -> str | None:
    """None when this process may drop the machine's caches, else why not (one line)."""
    from dlrig.bench.pack_cache import drop_all_caches

    return drop_all_caches(1)


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def dentries() -> int | None:
    from dlrig.bench.pack_cache import cached_dentries

    return cached_dentries()

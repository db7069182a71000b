"""The cache states `dlrig pack bench` and benchmarks/pack_vs_formats.py start from, on the real
page cache: page-cold, fully cold (drop_caches, root only) and warm, and the bench's answer
when the machine's caches cannot be dropped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dlrig import pack
from dlrig.bench import pack as bench_pack
from dlrig.bench import pack_cache
from tests.unit.test_pack_trees import make_tree


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("packcache")
    make_tree(root / "src", classes=2, per_class=12)
    pack.pack(root / "src", root / "dst", pack.PackOptions(shard_bytes=30_000, jobs=2))
    return root / "dst"


def _files(dst: Path) -> list[str]:
    return sorted(str(p) for p in (dst / "shards").glob("*.bin"))


def test_page_cold_and_warm_are_what_mincore_says(packed: Path) -> None:
    files = _files(packed)
    cold = pack_cache.set_cache(files, "cold")
    if cold > 0.01:
        pytest.skip("this filesystem keeps its pages (tmpfs?): cannot make files cold here")
    assert pack_cache.resident_fraction(files) <= 0.01
    assert pack_cache.set_cache(files, "warm") >= 0.99


def test_fully_cold_drops_pages_and_dentries(packed: Path) -> None:
    """One real `echo 3 > /proc/sys/vm/drop_caches` (a few seconds, machine-wide)."""
    if os.geteuid() != 0 or not os.access(pack_cache.DROP_CACHES, os.W_OK):
        pytest.skip("drop_caches needs root")
    files = _files(packed)
    pack_cache.set_cache(files, "warm")
    before = pack_cache.cached_dentries()
    try:
        resident = pack_cache.set_cache(files, "cold-full")
    except PermissionError as exc:
        pytest.skip(f"drop_caches refused here: {exc}")
    after = pack_cache.cached_dentries()
    assert resident <= 0.01
    assert before is not None and after is not None and after < before


def test_bench_says_in_one_line_when_it_cannot_drop_the_caches(
    packed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A control file that cannot be opened for writing, as in a container or without root.
    monkeypatch.setattr(pack_cache, "DROP_CACHES", tmp_path / "no" / "drop_caches")
    assert "cannot write" in (pack_cache.drop_all_caches(1) or "")
    results = bench_pack.run(packed, samples=8, stages=("raw",), drop_caches=True)
    [refused] = [r for r in results if r.test == "cold_full"]
    assert refused.verdict == "skip" and "judged on page-level cold" in (refused.note or "")
    assert not [r for r in results if r.detail.get("cache") == "cold-full"]
    judged = [r for r in results if r.unit == "x" and r.expected]
    assert [r.test for r in judged] == ["speedup_raw_cold_1p"]

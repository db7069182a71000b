"""`dlrig diagnose` against the corpus of real logs from public issue threads.

tests/corpus/logs/manifest-*.csv give each log the cause its thread confirmed and the thread's
address (SOURCES.md lists them too); clean/ holds logs of runs that ended well. SPLIT.toml
freezes the held-out threads: accuracy is reported on the held-out split and on the rest (the
"dev" split the signatures were checked against) separately, each against its own target.

The external set (SPLIT.toml [external], manifest-d.csv) was collected later from threads the
corpus did not have and measured before any signature change made for it; it is reported apart
from both splits, with its "unseen" third (a hash rule fixed before collection, never read while
fixing) reported on its own.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import re
import tomllib

import pytest

from dlrig import causes, diagnose
from dlrig.knowledge.command_check import check_command
from tests.conftest import CORPUS

LOGS = CORPUS / "logs"
SPLIT = tomllib.loads((LOGS / "SPLIT.toml").read_text(encoding="utf-8"))
HELDOUT_THREADS = {url for urls in SPLIT["heldout"].values() for url in urls}
LATER_MANIFESTS = set(SPLIT["later"]["manifests"])
EXTERNAL = SPLIT["external"]
EXTERNAL_MANIFESTS = set(EXTERNAL["manifests"])
# chosen because they match one signature: in no accuracy figure
TARGETED_MANIFESTS = set(SPLIT["targeted"]["manifests"])
VENDORS = SPLIT["vendors"]
VENDOR_MANIFESTS = set(VENDORS["manifests"])
HELDOUT_TARGET = 0.90
DEV_TARGET = 0.95
# the project's target on real logs it does not have (issue 9)
EXTERNAL_TARGET = 0.90


def _rows() -> list[dict[str, str]]:
    rows = []
    for manifest in sorted(LOGS.glob("manifest-*.csv")):
        for row in csv.DictReader(manifest.open(encoding="utf-8")):
            rows.append({**row, "manifest": manifest.name})
    return rows


def _external(row: dict[str, str]) -> bool:
    return row["manifest"] in EXTERNAL_MANIFESTS


def _unseen(row: dict[str, str]) -> bool:
    digest = hashlib.sha256((EXTERNAL["unseen_salt"] + row["url"]).encode()).hexdigest()
    return int(digest, 16) % 3 == 0


def _held_out(row: dict[str, str]) -> bool:
    if row["manifest"] in LATER_MANIFESTS:
        digest = hashlib.sha256((SPLIT["salt"] + row["url"]).encode()).hexdigest()
        return int(digest, 16) % 3 == 0
    return row["url"] in HELDOUT_THREADS


ROWS = _rows()
MEASURED = [r for r in ROWS if r["manifest"] not in TARGETED_MANIFESTS]
CRASHES = [r for r in MEASURED if r["cause"] != "none"]
CLEAN = [r for r in MEASURED if r["cause"] == "none"]


@functools.cache
def _diagnosis(file: str) -> diagnose.Diagnosis:
    return diagnose.diagnose_paths([LOGS / file])


def _root(row: dict[str, str]) -> str:
    result = _diagnosis(row["file"])
    return result.root.cause if result.root else "none"


def test_corpus_size_coverage_and_sources():
    assert len(CRASHES) >= 150
    assert len({r["cause"] for r in CRASHES}) >= 26
    assert len(CLEAN) >= 15
    sources = (LOGS / "SOURCES.md").read_text(encoding="utf-8")
    files = [r["file"] for r in ROWS]
    assert len(files) == len(set(files))
    for row in ROWS:
        assert (LOGS / row["file"]).is_file(), row
        assert row["url"].startswith("https://"), row
        assert row["cause"] == "none" or row["cause"] in causes.CAUSES, row
        assert row["confirmation"].strip(), row
        assert f"| `{row['file']}` | {row['url']} |" in sources, row["file"]


def test_split_is_by_thread_and_at_least_a_third():
    manifest_urls = {r["url"] for r in ROWS}
    # every frozen held-out thread is still in the corpus (a thread is never moved out)
    assert manifest_urls >= HELDOUT_THREADS
    corpus = [r for r in CRASHES if not _external(r)]
    held = [r for r in corpus if _held_out(r)]
    assert len(held) >= len(corpus) / 3, (len(held), len(corpus))
    external = [r for r in CRASHES if _external(r)]
    assert len(external) >= 60 and len([r for r in CLEAN if _external(r)]) >= 10
    # the external threads are new: none of them is in the older manifests
    assert not {r["url"] for r in ROWS if _external(r)} & {
        r["url"] for r in ROWS if not _external(r)
    }
    # the unseen third is a third (by the rule fixed before collection), on both sides of the set
    unseen = [r for r in external if _unseen(r)]
    assert len(external) / 5 <= len(unseen) <= len(external) / 2, (len(unseen), len(external))
    by_url: dict[str, set[bool]] = {}
    for row in ROWS:
        by_url.setdefault(row["url"], set()).add(_held_out(row))
    assert all(len(flags) == 1 for flags in by_url.values())  # one thread, one side


def _accuracy(rows: list[dict[str, str]]) -> tuple[float, list[tuple[str, str, str]]]:
    misses = [(r["file"], r["cause"], got) for r in rows if (got := _root(r)) != r["cause"]]
    return 1 - len(misses) / len(rows), misses


@pytest.mark.parametrize(("split", "target"), [("heldout", HELDOUT_TARGET), ("dev", DEV_TARGET)])
def test_top1_accuracy_per_split(split, target):
    rows = [
        r
        for r in CRASHES
        if not _external(r)
        and r["manifest"] not in VENDOR_MANIFESTS
        and _held_out(r) == (split == "heldout")
    ]
    accuracy, misses = _accuracy(rows)
    print(f"\ntop-1 accuracy, {split} split: {accuracy:.1%} of {len(rows)} crash logs")
    for miss in misses:
        print("  miss:", miss)
    assert accuracy >= target, misses


def test_top1_accuracy_on_amd_tensorflow_and_jax_logs():
    """ROCm, TensorFlow and JAX logs (SPLIT.toml [vendors]): reported per side, never below the
    figures measured when their signatures were written."""
    for side, floor in (("heldout", VENDORS["heldout_floor"]), ("dev", VENDORS["dev_floor"])):
        rows = [
            r
            for r in CRASHES
            if r["manifest"] in VENDOR_MANIFESTS and _held_out(r) == (side == "heldout")
        ]
        accuracy, misses = _accuracy(rows)
        right = len(rows) - len(misses)
        print(f"\ntop-1 accuracy, ROCm/TF/JAX {side}: {right}/{len(rows)} ({accuracy:.1%})")
        if side == "dev":
            for miss in misses:
                print("  miss:", miss)
        assert len(rows) == floor[1], (side, len(rows))
        assert right >= floor[0], misses if side == "dev" else (right, floor)


def test_top1_accuracy_on_the_external_set():
    """Reported three ways; the unseen third's misses are not printed (they are not read)."""
    external = [r for r in CRASHES if _external(r)]
    seen = [r for r in external if not _unseen(r)]
    unseen = [r for r in external if _unseen(r)]
    results = {}
    for name, rows in (
        ("external", external),
        ("external seen", seen),
        ("external unseen", unseen),
    ):
        accuracy, misses = _accuracy(rows)
        results[name] = accuracy
        print(f"\ntop-1 accuracy, {name}: {accuracy:.1%} of {len(rows)} crash logs")
        if name == "external seen":
            for miss in misses:
                print("  miss:", miss)
    assert results["external"] >= EXTERNAL_TARGET
    assert results["external unseen"] >= EXTERNAL_TARGET


def test_clean_logs_name_no_cause():
    named = [(r["file"], got) for r in CLEAN if (got := _root(r)) != "none"]
    assert not named, named


def test_every_crashing_cause_has_a_corpus_log():
    crashing = {c.id for c in causes.CAUSES.values() if c.crashes and not c.generic}
    assert {r["cause"] for r in CRASHES} == crashing


_PIP = re.compile(r"\bpip3? install\b")


def test_every_printed_install_command_exists_in_the_tables():
    """Each fix that names a wheel, an index or a driver is checked by the resolver's checker."""
    checked = 0
    problems = []
    for row in CRASHES:
        result = _diagnosis(row["file"])
        for finding in result.causes:
            for fix in finding.fixes:
                if not (_PIP.search(fix) or "driver to ≥" in fix or "this needs ≥" in fix):
                    continue
                checked += 1
                problems += [(row["file"], p) for p in check_command(fix)]
    assert checked >= 20  # the corpus exercises driver, arch, companion and CPU-build fixes
    assert not problems, problems


def test_no_kernel_image_on_an_rtx5090_names_the_driver_each_wheel_needs():
    # The log alone (no --machine): torch 2.0.1+cu118 on an RTX 5090. cu130 wheels need R580;
    # the 5090's first branch, R570, runs cu128 ones: the fix says both (QA finding 29).
    result = _diagnosis("no_kernel_image/deepprep-rtx5090-torch201-cu118.log")
    (fix,) = [f for f in result.causes[0].fixes if "pip install" in f]
    first, *rest = fix.splitlines()
    assert "whl/cu130" in first and "needs NVIDIA driver ≥ 580.65.06" in first
    older = next(line for line in rest if "whl/cu128" in line)
    assert "driver older than R580 (from 570.26)" in older
    assert check_command(fix, ("12.0",)) == []

"""`dlrig diagnose` against the corpus of real logs from public issue threads.

tests/corpus/logs/manifest-*.csv give each log the cause its thread confirmed and the thread's
address; clean/ holds logs of runs that ended well.
"""

from __future__ import annotations

import csv

from dlrig import causes, diagnose
from tests.conftest import CORPUS

LOGS = CORPUS / "logs"
ROWS = [
    row
    for name in ("manifest-a.csv", "manifest-b.csv")
    for row in csv.DictReader((LOGS / name).open(encoding="utf-8"))
]
CRASHES = [r for r in ROWS if r["cause"] != "none"]
CLEAN = [r for r in ROWS if r["cause"] == "none"]


def _root(row: dict) -> str:
    result = diagnose.diagnose_paths([LOGS / row["file"]])
    return result.root.cause if result.root else "none"


def test_corpus_size_and_coverage():
    assert len(CRASHES) >= 80
    assert len({r["cause"] for r in CRASHES}) >= 22
    assert len(CLEAN) >= 10
    for row in ROWS:
        assert (LOGS / row["file"]).is_file(), row
        assert row["url"].startswith("http"), row
        assert row["cause"] == "none" or row["cause"] in causes.CAUSES, row


def test_top1_accuracy_at_least_90_percent():
    misses = [(r["file"], r["cause"], got) for r in CRASHES if (got := _root(r)) != r["cause"]]
    accuracy = 1 - len(misses) / len(CRASHES)
    print(f"\ntop-1 accuracy on {len(CRASHES)} crash logs: {accuracy:.1%}")
    for miss in misses:
        print("  miss:", miss)
    assert accuracy >= 0.90, misses


def test_clean_logs_name_no_cause():
    named = [(r["file"], got) for r in CLEAN if (got := _root(r)) != "none"]
    assert not named, named


def test_every_cause_of_the_vocabulary_has_a_corpus_log():
    assert {r["cause"] for r in CRASHES} == {c.id for c in causes.CAUSES.values() if c.crashes}

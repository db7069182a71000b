"""What a scan of a log finds: each signature's hits with their lines and values, the markers,
finishes and facts, and the first error of each input. The scanner fills it; ranking reads it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dlrig.knowledge.signatures import Signature

MAX_EVIDENCE = 5
MAX_GROUP_SETS = 2000
# Facts that are the run's settings: printed before it fails, and echoed in replies after it.
SETTINGS = ("batch_size", "grad_accum")


@dataclass
class Hit:
    """What one signature found across the input."""

    signature: Signature
    count: int = 0
    first_line: int | None = None
    first_source: str | None = None
    last_line: dict[str, int] = field(default_factory=dict)  # per source
    evidence: list[tuple[str, int, str]] = field(default_factory=list)  # (source, line, text)
    groups: dict[str, str] = field(default_factory=dict)  # first value of each group
    # One occurrence's values, kept together: the most complete one, the latest on ties (the
    # fatal OOM comes after any survived probe, and names the same figures)
    best_groups: dict[str, str] = field(default_factory=dict)
    group_sets: list[dict[str, str]] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)

    def add(
        self,
        source: str,
        line: int,
        text: str,
        found: re.Match[str],
        values: dict[str, str],
        rank: int | None,
    ) -> None:
        self.count += 1
        if self.first_line is None:
            self.first_line, self.first_source = line, source
        self.last_line[source] = line
        for key, value in values.items():
            if not key.startswith("_"):
                self.groups.setdefault(key, value)
        if values and len(values) >= len(self.best_groups):
            self.best_groups = dict(values)
        values = {k: v for k, v in values.items() if k != "_subject"}
        shown = text.strip()
        if len(shown) > 400:
            start = max(0, found.start() - 150)
            shown = ("…" if start else "") + shown[start : start + 400] + "…"
        if values and len(self.group_sets) < MAX_GROUP_SETS:
            entry = {**values, "_line": str(line), "_source": source, "_text": shown}
            if rank is not None:
                entry["_rank"] = str(rank)
            self.group_sets.append(entry)
        if rank is not None:
            self.ranks.add(rank)
        if len(self.evidence) < MAX_EVIDENCE and all(e[2] != shown for e in self.evidence):
            self.evidence.append((source, line, shown))


@dataclass
class ScanResult:
    hits: dict[str, Hit] = field(default_factory=dict)
    markers: dict[str, int] = field(default_factory=dict)
    # finish evidence: (source, line, finish id) in the order found
    finishes: list[tuple[str, int, str]] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)
    # a run setting's name -> (pattern index, value, (source, line)) of each pattern's first
    # match in each input
    fact_history: dict[str, list[tuple[int, str, tuple[str, int]]]] = field(default_factory=dict)
    lines: int = 0
    bytes: int = 0
    sources: list[str] = field(default_factory=list)
    # The first line of each input that states an error (an exception, an abort): what a
    # diagnosis quotes when no signature names a cause. (source, line, text, rank)
    first_errors: dict[str, tuple[int, str, int | None]] = field(default_factory=dict)

"""Streaming log scanner: bounded memory, one fast pass, detailed matching only where it pays.

Logs of several GB are fed in chunks (`feed`) and never held whole. Each chunk is searched once
for the signatures' anchor literals (RE2 when available: a DFA, linear time); only the lines
that hold an anchor are decoded, cleaned (ANSI colours, progress-bar carriage returns, rank
prefixes) and tested against the signatures' regexes. A 100 MB line costs no more memory than
the chunk size: a match's "line" is cut to a few KB around the anchor.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dlrig.knowledge.signatures import Signature, SignatureSet

CHUNK_BYTES = 8 * 1024 * 1024
LOOKAHEAD_BYTES = 64 * 1024  # kept back so multi-line signatures can read the following lines
MAX_LINE_CHARS = 4096  # each side of an anchor
MAX_EVIDENCE = 5
MAX_GROUP_SETS = 2000

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_RANK_PREFIX = re.compile(r"^\s*\[(?:rank|default)(\d+)\]:\s?", re.I)
_RANK_IN_TEXT = re.compile(r"\[(?:rank|Rank) ?(\d+)\]|\blocal_rank: (\d+)|\bRANK (\d+)\b")


def _anchor_regex(anchors: Iterable[str]) -> Any:
    """One case-insensitive alternation of every anchor, compiled with RE2 when installed."""
    ordered = sorted(set(anchors), key=len, reverse=True)
    body = "|".join(re.escape(a) for a in ordered)
    try:
        import re2  # google-re2: linear-time DFA, several times faster on large alternations

        return re2.compile(("(?i)(?:" + body + ")").encode())
    except ImportError:  # pragma: no cover - google-re2 is a dependency; keep working without it
        return re.compile(("(?i)(?:" + body + ")").encode())


def clean_line(raw: str) -> tuple[str, int | None]:
    """(text without ANSI codes and rank prefix, rank if the prefix named one)."""
    text = _ANSI.sub("", raw)
    rank = None
    match = _RANK_PREFIX.match(text)
    if match:
        rank = int(match.group(1))
        text = text[match.end() :]
    return text.rstrip("\n"), rank


@dataclass
class Hit:
    """What one signature found across the input."""

    signature: Signature
    count: int = 0
    first_line: int | None = None
    first_source: str | None = None
    evidence: list[tuple[str, int, str]] = field(default_factory=list)  # (source, line, text)
    groups: dict[str, str] = field(default_factory=dict)
    group_sets: list[dict[str, str]] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)

    def add(
        self, source: str, line: int, text: str, found: re.Match[str], rank: int | None
    ) -> None:
        self.count += 1
        if self.first_line is None:
            self.first_line, self.first_source = line, source
        values = {k: v for k, v in found.groupdict().items() if v}
        for key, value in values.items():
            self.groups.setdefault(key, value)
        if values and len(self.group_sets) < MAX_GROUP_SETS:
            if rank is not None:
                values = {**values, "_rank": str(rank)}
            self.group_sets.append(values)
        if rank is not None:
            self.ranks.add(rank)
        shown = text.strip()
        if len(shown) > 400:
            start = max(0, found.start() - 150)
            shown = ("…" if start else "") + shown[start : start + 400] + "…"
        if len(self.evidence) < MAX_EVIDENCE and all(e[2] != shown for e in self.evidence):
            self.evidence.append((source, line, shown))


@dataclass
class _Stream:
    buffer: bytes = b""
    line: int = 1  # line number of buffer[0]


@dataclass
class ScanResult:
    hits: dict[str, Hit]
    markers: dict[str, int]
    facts: dict[str, str]
    lines: int
    bytes: int
    sources: list[str]


class Scanner:
    """Feed bytes in any pieces; `close()` returns what the signatures found."""

    def __init__(self, signature_set: SignatureSet) -> None:
        self.signatures = signature_set.signatures
        self.markers = signature_set.markers
        self._lowered = [(s, tuple(a.lower() for a in s.anchors)) for s in self.signatures]
        self._marker_lowered = [(m.id, tuple(a.lower() for a in m.anchors)) for m in self.markers]
        self._facts = [(f, tuple(a.lower() for a in f.anchors)) for f in signature_set.facts]
        all_anchors = [a for s in self.signatures for a in s.anchors]
        all_anchors += [a for m in self.markers for a in m.anchors]
        all_anchors += [a for f in signature_set.facts for a in f.anchors]
        self._anchors = _anchor_regex(all_anchors)
        self.hits: dict[str, Hit] = {}
        self.marker_counts: dict[str, int] = {m.id: 0 for m in self.markers}
        self.facts: dict[str, str] = {}
        self.total_bytes = 0
        self.sources: list[str] = []
        self._lines_done = 0
        self._streams: dict[str, _Stream] = {}
        self._current = "<input>"

    # --- input ----------------------------------------------------------------------------
    def start(self, source: str) -> None:
        """Begin an input (a file, or one stream of a command); each counts its own lines.

        Several inputs may be open at once (a command's stdout and stderr): `feed` names which.
        """
        if source not in self._streams:
            self._streams[source] = _Stream()
            self.sources.append(source)
        self._current = source

    def feed(self, data: bytes, source: str | None = None) -> None:
        name = source or self._current
        if name not in self._streams:
            self.start(name)
        stream = self._streams[name]
        self.total_bytes += len(data)
        stream.buffer = stream.buffer + data if stream.buffer else data
        if len(stream.buffer) > LOOKAHEAD_BYTES:
            self._flush(name, final=False)

    def close(self) -> ScanResult:
        for name in list(self._streams):
            self._flush(name, final=True)
        return ScanResult(
            hits=self.hits,
            markers=self.marker_counts,
            facts=self.facts,
            lines=self._lines_done,
            bytes=self.total_bytes,
            sources=self.sources,
        )

    # --- scanning -------------------------------------------------------------------------
    def _flush(self, source: str, final: bool) -> None:
        stream = self._streams[source]
        buffer = stream.buffer
        if not buffer:
            return
        if final:
            limit = len(buffer)
        else:
            limit = buffer.rfind(b"\n", 0, len(buffer) - LOOKAHEAD_BYTES) + 1
            if limit <= 0:
                # One enormous line: scan up to the lookahead and keep going, bounded.
                limit = len(buffer) - LOOKAHEAD_BYTES
        line = stream.line
        counted_to = 0
        last_line_start = -1
        for match in self._anchors.finditer(buffer, 0, limit):
            position = match.start()
            start = max(
                buffer.rfind(b"\n", 0, position) + 1,
                buffer.rfind(b"\r", 0, position) + 1,
                position - MAX_LINE_CHARS,
            )
            if start == last_line_start:
                continue  # one line is examined once, whatever number of anchors it holds
            last_line_start = start
            line += buffer.count(b"\n", counted_to, position)
            counted_to = position
            self._examine(source, buffer, start, position, line)
        newlines = buffer.count(b"\n", counted_to, limit)
        self._lines_done += buffer.count(b"\n", 0, counted_to) + newlines
        stream.line = line + newlines
        stream.buffer = buffer[limit:]

    def _line_end(self, buffer: bytes, position: int) -> int:
        ends = [e for e in (buffer.find(b"\n", position), buffer.find(b"\r", position)) if e != -1]
        end = min(ends) if ends else len(buffer)
        return min(end, position + MAX_LINE_CHARS)

    def _examine(self, source: str, buffer: bytes, start: int, position: int, line: int) -> None:
        end = self._line_end(buffer, position)
        raw = buffer[start:end].decode("utf-8", errors="replace")
        text, rank = clean_line(raw)
        if rank is None:
            found_rank = _RANK_IN_TEXT.search(text)
            if found_rank:
                rank = int(next(g for g in found_rank.groups() if g))
        lowered = text.lower()
        for marker_id, anchors in self._marker_lowered:
            if any(anchor in lowered for anchor in anchors):
                self.marker_counts[marker_id] += 1
        for fact, anchors in self._facts:
            if fact.id in self.facts or not any(anchor in lowered for anchor in anchors):
                continue
            for pattern in fact.patterns:
                found_fact = pattern.search(text)
                if found_fact:
                    self.facts.update({k: v for k, v in found_fact.groupdict().items() if v})
                    break
        for signature, anchors in self._lowered:
            if not any(anchor in lowered for anchor in anchors):
                continue
            subject = text
            if signature.window:
                subject = self._with_following(buffer, end, text, signature.window)
            found = signature.match(subject)
            if found is None:
                continue
            hit = self.hits.get(signature.id)
            if hit is None:
                hit = self.hits[signature.id] = Hit(signature)
            hit.add(source, line, text, found, rank)

    def _with_following(self, buffer: bytes, end: int, text: str, lines: int) -> str:
        parts = [text]
        cursor = end
        for _ in range(lines):
            if cursor >= len(buffer):
                break
            if buffer[cursor : cursor + 1] in (b"\n", b"\r"):
                cursor += 1
            next_end = self._line_end(buffer, cursor)
            following, _ = clean_line(buffer[cursor:next_end].decode("utf-8", errors="replace"))
            parts.append(following)
            cursor = next_end
        return "\n".join(parts)

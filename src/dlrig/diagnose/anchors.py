"""Where the signatures' anchor literals occur in a chunk of log: one pass of the fastest
engine installed (Hyperscan, else RE2, else Python's re), case-insensitive, offsets in order."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Any


class _Engine:
    """Where the anchors occur in a buffer: offsets inside each match, in order."""

    name = "python-re"

    def __init__(self, anchors: list[str]) -> None:
        body = "|".join(re.escape(a) for a in anchors)
        self._regex: Any = re.compile(("(?i)(?:" + body + ")").encode())

    def offsets(self, buffer: bytearray, limit: int) -> Iterable[int]:
        return (m.start() for m in self._regex.finditer(buffer, 0, limit))


class _Re2(_Engine):
    """google-re2 (a dependency): one DFA over the alternation, linear time."""

    name = "re2"

    def __init__(self, anchors: list[str]) -> None:
        import re2

        body = "|".join(re.escape(a) for a in anchors)
        self._regex = re2.compile(("(?i)(?:" + body + ")").encode())

    def offsets(self, buffer: bytearray, limit: int) -> Iterable[int]:
        return (m.start() for m in self._regex.finditer(memoryview(buffer)[:limit]))


class _Hyperscan(_Engine):
    """Intel's Hyperscan (the `fast` extra): SIMD multi-literal matching, several times faster
    than a DFA over hundreds of literals. It reports where each match ends; the offset before
    that end lies inside the match, which is all the line lookup needs (anchors hold no newline)."""

    name = "hyperscan"

    def __init__(self, anchors: list[str]) -> None:
        import hyperscan

        self._hs = hyperscan
        expressions = [re.escape(a).encode() for a in anchors]
        self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self._db.compile(
            expressions=expressions,
            ids=list(range(len(expressions))),
            elements=len(expressions),
            flags=[hyperscan.HS_FLAG_CASELESS] * len(expressions),
        )

    def offsets(self, buffer: bytearray, limit: int) -> Iterable[int]:
        found: list[int] = []

        def on_match(_id: int, _start: int, end: int, _flags: int, _context: object) -> None:
            found.append(end - 1)

        # Any: the stubs say str or bytes; the library reads any buffer (a slice, not a copy).
        view: Any = memoryview(buffer)[:limit]
        self._db.scan(view, match_event_handler=on_match)
        found.sort()  # reported by end offset, several anchors may end alike
        return found


ENGINES = {"hyperscan": _Hyperscan, "re2": _Re2, "python-re": _Engine}


def select_engine(anchors: Iterable[str], name: str | None = None) -> _Engine:
    """The fastest engine installed (DLRIG_DIAGNOSE_ENGINE or `name` picks one)."""
    ordered = sorted(set(anchors), key=len, reverse=True)
    wanted = name or os.environ.get("DLRIG_DIAGNOSE_ENGINE")
    for candidate in [wanted] if wanted else list(ENGINES):
        if candidate not in ENGINES:
            raise ValueError(f"unknown diagnose engine {candidate!r}; known: {', '.join(ENGINES)}")
        try:
            return ENGINES[candidate](ordered)
        except ImportError:
            if wanted:
                raise
    return _Engine(ordered)

"""Where the signatures' anchor literals occur in a chunk of log: one pass of the fastest
engine installed (Hyperscan, else RE2, else Python's re), case-insensitive, offsets in order."""

from __future__ import annotations

import concurrent.futures
import os
import re
from collections.abc import Iterable
from typing import Any

# Below this a chunk is scanned in one piece: a helper thread's hand-off costs more than it saves.
SPLIT_BYTES = 1 << 20


# The anchor index of a match whose anchor the engine does not tell (an alternation reports the
# first that matched at a place, not every one that did): the line is then checked for all.
UNKNOWN = -1


class _Engine:
    """Where the anchors occur in a buffer: offsets inside each match, in order."""

    name = "python-re"

    def __init__(self, anchors: list[str]) -> None:
        self.anchors = anchors  # in the order `matches` numbers them
        body = "|".join(re.escape(a) for a in anchors)
        self._regex: Any = re.compile(("(?i)(?:" + body + ")").encode())

    def offsets(self, buffer: bytearray, limit: int) -> Iterable[int]:
        return (m.start() for m in self._regex.finditer(buffer, 0, limit))

    def matches(self, buffer: bytearray, limit: int) -> list[tuple[int, int]]:
        """(offset inside the match, the anchor's index in `anchors` or UNKNOWN), in order."""
        return [(offset, UNKNOWN) for offset in self.offsets(buffer, limit)]


class _Re2(_Engine):
    """google-re2 (a dependency): one DFA over the alternation, linear time."""

    name = "re2"

    def __init__(self, anchors: list[str]) -> None:
        import re2

        self.anchors = anchors
        body = "|".join(re.escape(a) for a in anchors)
        # RE2's default 8 MiB for the DFA is too little for ~1,000 literals: it would say "DFA
        # out of memory" on stderr and fall back to a slower engine
        options = re2.Options()
        options.max_mem = 256 << 20
        self._regex = re2.compile(("(?i)(?:" + body + ")").encode(), options)

    def offsets(self, buffer: bytearray, limit: int) -> Iterable[int]:
        return (m.start() for m in self._regex.finditer(memoryview(buffer)[:limit]))


class _Hyperscan(_Engine):
    """Intel's Hyperscan (the `fast` extra): SIMD multi-literal matching, several times faster
    than a DFA over hundreds of literals. It reports where each match ends; the offset before
    that end lies inside the match, which is all the line lookup needs (anchors hold no newline).

    A large chunk is cut at a newline near its middle and the halves scanned at once, the
    second by a helper thread: Hyperscan releases the GIL while it scans, and no anchor can
    straddle a newline, so the halves find what the whole would."""

    name = "hyperscan"

    def __init__(self, anchors: list[str]) -> None:
        import hyperscan

        self.anchors = anchors
        expressions = [re.escape(a).encode() for a in anchors]
        self._db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        self._db.compile(
            expressions=expressions,
            ids=list(range(len(expressions))),
            elements=len(expressions),
            flags=[hyperscan.HS_FLAG_CASELESS] * len(expressions),
        )
        # one scratch space per thread: a scratch in use by another scan is refused
        self._scratch = (hyperscan.Scratch(self._db), hyperscan.Scratch(self._db))
        self._helper: concurrent.futures.ThreadPoolExecutor | None = None

    def _scan(self, buffer: bytearray, start: int, end: int, scratch: Any) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []

        def on_match(anchor: int, _start: int, match_end: int, _flags: int, _ctx: object) -> None:
            found.append((start + match_end - 1, anchor))

        # The views are made and released here, in the thread that scans: a view still held
        # when the caller next resizes the buffer would make the resize fail (BufferError).
        # Any: the stubs say str or bytes; the library reads any buffer (a slice, not a copy).
        with memoryview(buffer) as whole, whole[start:end] as view:
            part: Any = view
            self._db.scan(part, match_event_handler=on_match, scratch=scratch)
        found.sort()  # reported by end offset, several anchors may end alike
        return found

    def matches(self, buffer: bytearray, limit: int) -> list[tuple[int, int]]:
        """Every anchor's every match (Hyperscan reports overlapping ones too), with its index."""
        middle = buffer.find(b"\n", limit // 2, limit) + 1 if limit >= SPLIT_BYTES else 0
        if middle <= 0 or _hardware_threads() < 2:
            return self._scan(buffer, 0, limit, self._scratch[0])
        if self._helper is None:
            self._helper = concurrent.futures.ThreadPoolExecutor(1, "dlrig-anchors")
        second = self._helper.submit(self._scan, buffer, middle, limit, self._scratch[1])
        try:
            first = self._scan(buffer, 0, middle, self._scratch[0])
        finally:
            rest = second.result()  # awaited even when the first half failed: its view is gone
        return first + rest

    def offsets(self, buffer: bytearray, limit: int) -> Iterable[int]:
        return [offset for offset, _ in self.matches(buffer, limit)]


def _hardware_threads() -> int:
    """Threads the scan may use: DLRIG_DIAGNOSE_THREADS (1 keeps it to one), else the CPUs this
    process may run on."""
    wanted = os.environ.get("DLRIG_DIAGNOSE_THREADS", "")
    if wanted.isdigit():
        return max(1, int(wanted))  # 0 is read as 1: no thread at all is not a setting
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


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

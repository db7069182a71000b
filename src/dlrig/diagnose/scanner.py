"""Streaming log scanner: bounded memory, one fast pass, detailed matching only where it pays.

Logs of several GB are fed in chunks (`feed`) and never held whole. Each chunk is searched once
for the signatures' anchor literals (RE2: a DFA, linear time); only the lines that hold an
anchor are decoded, cleaned (ANSI colours, progress-bar carriage returns, rank and launcher
prefixes) and tested against the signatures' regexes. A 100 MB line costs no more memory than
the chunk size: a match's "line" is cut to a few KB around the anchor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dlrig.diagnose.anchors import UNKNOWN, select_engine
from dlrig.diagnose.found import SETTINGS, Hit, ScanResult
from dlrig.diagnose.lines import STATES_ERROR, clean_line, rank_in_text
from dlrig.knowledge.signatures import SignatureSet

CHUNK_BYTES = 8 * 1024 * 1024
LOOKAHEAD_BYTES = 64 * 1024  # kept back so multi-line signatures can read the following lines
MAX_LINE_CHARS = 4096  # each side of an anchor
# A line shorter than this was not wrapped by a paste or terminal (they wrap at 80 columns or
# wider): only longer lines are tried joined to the next when a pattern fails.
WRAP_MIN_CHARS = 60
# How many distinct lines that gave nothing are remembered (a log that repeats one warning every
# step would otherwise have each copy examined against every signature).
BARREN_LINES = 4096
# A signature tried across wraps this often in one input without a match stops being tried: a
# log that repeats an anchored line (an overflow message on every step) would otherwise pay the
# second match on each of them.
WRAP_TRIES = 64
T = TypeVar("T")
SETTING_LINES = 64  # lines per input whose every setting pattern is tried


@dataclass
class _Stream:
    # A bytearray grown by each chunk and cut at the front after each scan: its memory is reused
    # (a fresh bytes object per chunk costs a page fault per 4 KiB on the way in).
    buffer: bytearray = field(default_factory=bytearray)
    line: int = 1  # line number of buffer[0]


def _count_newlines(buffer: bytearray, start: int, end: int) -> int:
    return buffer.count(b"\n", start, end)


def _newline_counter() -> Any:
    """Counting newlines (for line numbers) is the largest cost of a big log: bytearray.count
    runs at ~1.6 GB/s here, numpy's comparison at ~7 GB/s. numpy is imported only once an input
    is large (its import costs more than it saves on a small log), where installed (the `fast`
    extra)."""
    try:
        import numpy
    except ImportError:
        return _count_newlines

    def count(buffer: bytearray, start: int, end: int) -> int:
        if end - start < 65536:
            return buffer.count(b"\n", start, end)
        view = numpy.frombuffer(buffer, dtype=numpy.uint8, count=end - start, offset=start)
        return int(numpy.count_nonzero(view == 10))

    return count


def _only(items: list[T], index: dict[str, list[int]], present: set[str]) -> list[T]:
    """The items (in their order) that own one of the anchors present."""
    return [items[i] for i in sorted({i for anchor in present for i in index.get(anchor, ())})]


class Scanner:
    """Feed bytes in any pieces; `close()` returns what the signatures found."""

    def __init__(self, signature_set: SignatureSet, engine: str | None = None) -> None:
        self.signatures = signature_set.signatures
        self._lowered = [(s, frozenset(a.lower() for a in s.anchors)) for s in self.signatures]
        self._marker_lowered = [
            (m.id, frozenset(a.lower() for a in m.anchors)) for m in signature_set.markers
        ]
        self._finishes = [
            (f, frozenset(a.lower() for a in f.anchors)) for f in signature_set.finishes
        ]
        self._facts = [(f, frozenset(a.lower() for a in f.anchors)) for f in signature_set.facts]
        all_anchors = [a for s in self.signatures for a in s.anchors]
        all_anchors += [a for m in signature_set.markers for a in m.anchors]
        all_anchors += [a for f in signature_set.finishes for a in f.anchors]
        all_anchors += [a for f in signature_set.facts for a in f.anchors]
        self._anchors = select_engine(all_anchors, engine)
        self._anchor_text = [a.lower() for a in self._anchors.anchors]
        # anchor -> the indices of the markers, finishes, facts and signatures it belongs to
        self._owners: list[dict[str, list[int]]] = []
        for group in (self._marker_lowered, self._finishes, self._facts, self._lowered):
            index: dict[str, list[int]] = {}
            for position, (_, anchors) in enumerate(group):
                for anchor in anchors:
                    index.setdefault(anchor, []).append(position)
            self._owners.append(index)
        # What is found so far; close() hands it over once every input is scanned to its end.
        self.found = ScanResult(markers={m.id: 0 for m in signature_set.markers})
        self._fact_rank: dict[str, int] = {}  # index of the pattern that gave each fact
        self._setting_lines: dict[tuple[str, str], int] = {}  # (fact, input) -> lines read
        self._wrap_tries: dict[tuple[str, str], int] = {}  # (input, signature id) -> failed joins
        self._barren: set[object] = set()  # lines that matched an anchor and gave nothing
        self._streams: dict[str, _Stream] = {}
        self._current = "<input>"
        self._count = _count_newlines  # numpy's, once an input fills a whole chunk

    # --- input ----------------------------------------------------------------------------
    def start(self, source: str) -> None:
        """Begin an input (a file, or one stream of a command); each counts its own lines.

        Several inputs may be open at once (a command's stdout and stderr): `feed` names which.
        """
        if source not in self._streams:
            self._streams[source] = _Stream()
            self.found.sources.append(source)
        self._current = source

    def feed(self, data: bytes | memoryview, source: str | None = None) -> None:
        name = source or self._current
        if name not in self._streams:
            self.start(name)
        stream = self._streams[name]
        self.found.bytes += len(data)
        stream.buffer += data
        if len(stream.buffer) > LOOKAHEAD_BYTES:
            self._flush(name, final=False)

    def feed_from(self, reader: Any, source: str, chunk_bytes: int = CHUNK_BYTES) -> None:
        """Read a whole binary stream (`readinto`) into this input and scan it.

        The stream's bytes land in the scanner's own buffer, which is scanned where they lie:
        no copy beyond the read itself, and the same memory for every chunk."""
        self.start(source)
        stream = self._streams[source]
        buffer = stream.buffer
        filled = len(buffer)  # bytes of this input fed before, not yet scanned
        buffer.extend(bytes(max(0, LOOKAHEAD_BYTES + chunk_bytes - filled)))
        while True:
            count = reader.readinto(memoryview(buffer)[filled:])
            if not count:
                break
            self.found.bytes += count
            filled += count
            if filled < len(buffer):
                continue  # a pipe gives less than asked: fill the buffer before scanning
            if self._count is _count_newlines:
                self._count = _newline_counter()
            limit = self._scan(source, buffer, filled, final=False)
            buffer[: filled - limit] = buffer[limit:filled]  # the lookahead moves to the front
            filled -= limit
        del buffer[filled:]  # what is left is scanned with the rest by close()

    def close(self) -> ScanResult:
        for name in list(self._streams):
            self._flush(name, final=True)
        return self.found

    # --- scanning -------------------------------------------------------------------------
    def _flush(self, source: str, final: bool) -> None:
        buffer = self._streams[source].buffer
        if buffer:
            limit = self._scan(source, buffer, len(buffer), final)
            del buffer[:limit]

    def _scan(self, source: str, buffer: bytearray, end: int, final: bool) -> int:
        """Scan `buffer[:end]` up to the last whole line that leaves the lookahead after it (all
        of it when `final`); returns how far it scanned."""
        stream = self._streams[source]
        if final:
            limit = end
        else:
            limit = buffer.rfind(b"\n", 0, end - LOOKAHEAD_BYTES) + 1
            if limit <= 0:
                # One enormous line: scan up to the lookahead and keep going, bounded.
                limit = end - LOOKAHEAD_BYTES
        line = stream.line
        counted_to = 0
        # One line is examined once, whatever number of anchors it holds, with the anchors the
        # engine found in it: a line is only tried against what those anchors can match.
        pending: tuple[int, int, int, list[int]] | None = None  # start, position, line, anchors
        for position, anchor in self._anchors.matches(buffer, limit):
            # searched back at most a line's length: a log without carriage returns would
            # otherwise be searched to the chunk's start for every anchored line
            floor = max(0, position - MAX_LINE_CHARS)
            start = max(
                buffer.rfind(b"\n", floor, position) + 1,
                buffer.rfind(b"\r", floor, position) + 1,
                floor,
            )
            if pending is not None and start == pending[0]:
                pending[3].append(anchor)
                continue
            if pending is not None:
                self._examine(source, buffer, *pending)
            line += self._count(buffer, counted_to, position)
            counted_to = position
            pending = (start, position, line, [anchor])
        if pending is not None:
            self._examine(source, buffer, *pending)
        # the newlines up to the last anchor were counted on the way: count only the rest
        total = line - stream.line + self._count(buffer, counted_to, limit)
        self.found.lines += total
        stream.line += total
        return limit

    def _line_end(self, buffer: bytearray, position: int) -> int:
        # Bounded: a log without any \r would otherwise be searched to the end of the chunk
        # for each anchored line.
        limit = min(len(buffer), position + MAX_LINE_CHARS)
        ends = [
            e
            for e in (buffer.find(b"\n", position, limit), buffer.find(b"\r", position, limit))
            if e != -1
        ]
        return min(ends) if ends else limit

    def _examine(
        self,
        source: str,
        buffer: bytearray,
        start: int,
        position: int,
        line: int,
        anchors_found: list[int],
    ) -> None:
        end = self._line_end(buffer, position)
        line_bytes = bytes(buffer[start:end])
        known = UNKNOWN not in anchors_found and b"\x1b" not in line_bytes
        # what a line is tried against depends on the anchors found in it (a window of a long
        # line holds fewer than the whole line): they are part of what it said nothing for
        barren_key: object = (line_bytes, frozenset(anchors_found)) if known else line_bytes
        if barren_key in self._barren:
            return  # the same line said nothing before (a warning a run repeats every step)
        text, prefix_rank = clean_line(line_bytes.decode("utf-8", errors="replace"))
        rank_read: list[int | None] = []

        def rank() -> int | None:
            # read from the text only for a line that gives something (most lines do not)
            if not rank_read:
                rank_read.append(prefix_rank if prefix_rank is not None else rank_in_text(text))
            return rank_read[0]

        lowered = text.lower()
        markers, finishes, facts, signatures = (
            self._marker_lowered,
            self._finishes,
            self._facts,
            self._lowered,
        )
        if known:
            # Only what the line's anchors can match is tried (colour codes, cleaned out of the
            # text, may join an anchor they split: such a line is checked for every anchor).
            present = {self._anchor_text[a] for a in anchors_found}
            markers = _only(markers, self._owners[0], present)
            finishes = _only(finishes, self._owners[1], present)
            facts = _only(facts, self._owners[2], present)
            signatures = _only(signatures, self._owners[3], present)

        def holds(anchors: frozenset[str]) -> bool:
            return known or any(anchor in lowered for anchor in anchors)

        found_so_far = self.found
        # A line that adds nothing (no marker, finish, fact or match) is remembered and skipped
        # when it comes again, unless what it gave depended on the lines around it (a windowed
        # signature's anchor, a try at joining a wrapped line).
        barren = True
        for marker_id, anchors in markers:
            # markers have no pattern of their own: the cleaned text must hold the anchor (a
            # launcher prefix cut by cleaning may have held it)
            if any(anchor in lowered for anchor in anchors):
                barren = False
                found_so_far.markers[marker_id] += 1
                if source not in found_so_far.first_errors and STATES_ERROR.search(text):
                    found_so_far.first_errors[source] = (line, text.strip()[:400], rank())
        for finish, anchors in finishes:
            if holds(anchors) and any(p.search(text) for p in finish.patterns):
                barren = False
                found_so_far.finishes.append((source, line, finish.id))
        for fact, anchors in facts:
            if holds(anchors) and self._read_fact(fact.id, fact.patterns, text, (source, line)):
                barren = False
        for signature, anchors in signatures:
            if not holds(anchors):
                continue
            if signature.window:
                barren = False
            subject = text
            if signature.window:
                subject = self._with_following(buffer, end, text, signature.window)
            found = signature.match(subject)
            if found is None and not signature.window and len(text) >= WRAP_MIN_CHARS:
                tried = (source, signature.id)
                if self._wrap_tries.get(tried, 0) < WRAP_TRIES:
                    barren = False
                    found, subject = self._across_wrap(signature, buffer, end, text)
                    if found is None:
                        self._wrap_tries[tried] = self._wrap_tries.get(tried, 0) + 1
            if found is None:
                continue
            barren = False
            values = {k: v for k, v in found.groupdict().items() if v}
            if signature.fields:
                for key, value in signature.read_fields(subject).items():
                    values.setdefault(key, value)
                values["_subject"] = subject[:MAX_LINE_CHARS]
            hit = found_so_far.hits.get(signature.id)
            if hit is None:
                hit = found_so_far.hits[signature.id] = Hit(signature)
            hit.add(source, line, text, found, values, rank())
        if barren and len(self._barren) < BARREN_LINES:
            self._barren.add(barren_key)

    def _read_fact(
        self,
        fact_id: str,
        patterns: tuple[re.Pattern[str], ...],
        text: str,
        place: tuple[str, int],
    ) -> bool:
        """Keep the value of the most specific pattern seen (its index is its rank); True when
        this line gave it. A run setting's every pattern is tried and its matches kept (the
        first per pattern and input): the best one may be a reply's after the failure."""
        best = self._fact_rank.get(fact_id, len(patterns))
        setting = fact_id in SETTINGS
        if setting:
            # bounded: a log that prints its batch size on every step would otherwise pay every
            # pattern on every such line; a run prints its settings near its start
            seen = self._setting_lines.get((fact_id, place[0]), 0)
            self._setting_lines[(fact_id, place[0])] = seen + 1
            setting = seen < SETTING_LINES
        gave = False
        for index, pattern in enumerate(patterns if setting else patterns[:best]):
            found = pattern.search(text)
            if not found:
                continue
            values = {k: v for k, v in found.groupdict().items() if v}
            if setting:
                for name, value in values.items():
                    history = self.found.fact_history.setdefault(name, [])
                    if not any(i == index and p[0] == place[0] for i, _, p in history):
                        history.append((index, value, place))
            if index < best:
                self.found.facts.update(values)
                self._fact_rank[fact_id] = index
                gave = True
            break
        return gave

    def _across_wrap(
        self, signature: Any, buffer: bytearray, end: int, text: str
    ) -> tuple[re.Match[str] | None, str]:
        """A paste or a terminal wraps long messages at a fixed width, cutting a word or the
        space between two ("... in KV cache (\n3984)"): the line joined to the next, both ways.
        Only a match that crosses the join counts (one wholly in the next line is that line's)."""
        following = self._with_following(buffer, end, text, 1)
        if following == text:
            return None, text
        rest = following[len(text) + 1 :]
        for separator in ("", " "):
            joined = text + separator + rest
            found = signature.match(joined)
            if found is not None and found.start() < len(text) < found.end() - len(separator):
                return found, joined
        return None, text

    def _with_following(self, buffer: bytearray, end: int, text: str, lines: int) -> str:
        parts = [text]
        cursor = end
        for _ in range(lines):
            if cursor >= len(buffer):
                break
            if buffer[cursor : cursor + 2] == b"\r\n":  # Windows line ends
                cursor += 2
            elif buffer[cursor] in (0x0A, 0x0D):  # \n, \r
                cursor += 1
            next_end = self._line_end(buffer, cursor)
            following, _ = clean_line(buffer[cursor:next_end].decode("utf-8", errors="replace"))
            parts.append(following)
            cursor = next_end
        return "\n".join(parts)

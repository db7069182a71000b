"""Time as sets of intervals: the union of what ran, what two sets share, what is left.

Everything in a trace overlaps: kernels on several streams, copies beside kernels, a data
loader beside an optimizer. Busy time is the length of a union, never a sum of durations.
Intervals are (start, end) pairs in the trace's µs; a "set" is sorted and disjoint.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

Span = tuple[float, float]


def union(spans: Iterable[Span]) -> list[Span]:
    """The disjoint, sorted union."""
    out: list[Span] = []
    for start, end in sorted(spans):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            if end > out[-1][1]:
                out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def length(spans: Sequence[Span]) -> float:
    return sum(end - start for start, end in spans)


def intersect(a: Sequence[Span], b: Sequence[Span]) -> list[Span]:
    """The overlap of two disjoint sorted sets."""
    out: list[Span] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start = max(a[i][0], b[j][0])
        end = min(a[i][1], b[j][1])
        if end > start:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Sequence[Span], b: Sequence[Span]) -> list[Span]:
    """What of `a` lies outside `b` (both disjoint and sorted)."""
    out: list[Span] = []
    j = 0
    for start, end in a:
        cursor = start
        while j < len(b) and b[j][1] <= cursor:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                out.append((cursor, b[k][0]))
            cursor = max(cursor, b[k][1])
            if cursor >= end:
                break
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def clip(spans: Sequence[Span], window: Span) -> list[Span]:
    """The part of a disjoint sorted set inside `window` (found by bisection: a step's window
    is a small part of a trace's spans)."""
    low, high = window
    i = bisect.bisect_right(spans, low, key=lambda span: span[1])
    out: list[Span] = []
    while i < len(spans) and spans[i][0] < high:
        start, end = spans[i]
        start, end = max(start, low), min(end, high)
        if end > start:
            out.append((start, end))
        i += 1
    return out

"""Reading a Kineto trace (what `torch.profiler` writes with `export_chrome_trace`) into plain,
typed events: the host's steps and operators, the runtime's launches and the GPU's kernels,
copies and sets, on NVIDIA (CUDA) and AMD (ROCm/HIP) alike (`events.py` says what is kept).

Only what the analysis needs is decoded: a trace of a few hundred MB holds millions of events
and most of them are operators nested inside other operators. The file is read as a stream;
a file that is not a Kineto trace is an `InputError` naming it.
"""

from __future__ import annotations

import json
import re
import zlib
from math import isfinite
from pathlib import Path
from typing import Any

from dlrig.errors import InputError
from dlrig.inputs import check_readable_file
from dlrig.profile.events import (
    BACKWARD_PREFIX,
    DATALOADER_PREFIX,
    GPU_KINDS,
    HOST_CATEGORIES,
    RUNTIME_CATEGORIES,
    Collector,
    Trace,
)


def load(path: Path | str) -> Trace:
    """The trace in `path` (`.json` or gzip, whatever its name says), read as a stream: a
    trace of hundreds of MB is never held whole, as text or as objects."""
    p = check_readable_file(path, "Kineto trace")
    if p.stat().st_size == 0:
        raise InputError(f"{p}: the file is empty", fix="give a trace torch.profiler wrote")
    with p.open("rb") as stream:
        return _read(_blocks(stream, str(p)), str(p))


def parse(raw: bytes, label: str) -> Trace:
    """The trace in `raw` (JSON or gzip bytes)."""
    import io

    return _read(_blocks(io.BytesIO(raw), label), label)


_BLOCK = 1 << 20
# Where an event starts. Every writer of Kineto traces (Kineto itself, json.dump of one) puts
# "ph" first in an event; an unescaped `{"ph":` cannot occur inside a JSON string, so this
# finds event boundaries without parsing the events between them.
_EVENT = re.compile(
    rb'\{\s*"ph"\s*:\s*"(\w)"(?:\s*,\s*"cat"\s*:\s*"([^"]*)"'
    rb'(?:\s*,\s*"name"\s*:\s*"([^"]*)")?)?'
)
_CAT = re.compile(rb'"cat"\s*:\s*"([^"]*)"')
_NAME = re.compile(rb'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_WANTED_HOST_NAMES = (
    b"ProfilerStep#",
    DATALOADER_PREFIX.encode(),
    b"Optimizer.",
    BACKWARD_PREFIX.encode(),
)
# category (as written, and lower-cased) -> what the scan does with the event
_ROUTES: dict[bytes, str] = {
    **{c.encode(): kind for c, kind in GPU_KINDS.items()},
    **{c.encode(): "runtime" for c in RUNTIME_CATEGORIES},
    **{c.encode(): "host" for c in HOST_CATEGORIES},
    b"gpu_user_annotation": "annotation",
}
_GARBLED = (
    "not a Kineto trace (not JSON{where}; a trace cut short while it was written reads like this)"
)
_GARBLED_FIX = (
    "give the .json or .json.gz that torch.profiler's export_chrome_trace or "
    "tensorboard_trace_handler wrote, complete"
)


def _blocks(stream: Any, label: str) -> Any:
    """The decompressed bytes of `stream` in blocks (gzip or not)."""
    first = stream.read(_BLOCK)
    if first[:2] != b"\x1f\x8b":
        while first:
            yield first
            first = stream.read(_BLOCK)
        return
    inflate = zlib.decompressobj(wbits=47)
    data = first
    try:
        while data:
            # max_length bounds each block: a trace compresses 20:1, and one read's worth
            # inflated at once would be what streaming is here to avoid.
            out = inflate.decompress(data, _BLOCK)
            if out:
                yield out
            if inflate.eof:
                # A file of several gzip members (concatenated, as gzip itself allows).
                data = inflate.unused_data or stream.read(_BLOCK)
                if data:
                    inflate = zlib.decompressobj(wbits=47)
                continue
            data = inflate.unconsumed_tail or stream.read(_BLOCK)
        tail = inflate.flush()
        if tail:
            yield tail
    except zlib.error as exc:
        raise InputError(
            f"{label}: bad gzip ({exc})",
            fix="copy the trace again in full (gzip -t FILE checks it)",
        ) from None
    if not inflate.eof:
        raise InputError(
            f"{label}: the gzip stream is cut short",
            fix="copy the trace again in full (gzip -t FILE checks it)",
        )


def _read(blocks: Any, label: str) -> Trace:
    collector = Collector(label)
    buffer = b""
    head: bytes | None = None
    found = False
    for block in blocks:
        buffer += block
        if head is None:
            at = _array_start(buffer)
            if at < 0:
                if len(buffer) > 64 * _BLOCK:  # no traceEvents array in the first 64 MB
                    break
                continue
            head, buffer = buffer[:at], buffer[at:]
        matches = list(_EVENT.finditer(buffer))
        if len(matches) < 2:
            continue
        found = True
        _scan(buffer, matches, collector)
        buffer = buffer[matches[-1].start() :]
    if head is None:
        return _whole(buffer, label)
    if not found:
        # Events that do not start with "ph" (another writer): the whole document, parsed.
        return _whole(head + buffer, label)
    trailer = _finish_events(buffer, collector, label)
    return collector.trace(_header(head, trailer, label))


def _array_start(buffer: bytes) -> int:
    """The offset just after `"traceEvents": [`, or -1."""
    match = re.search(rb'"traceEvents"\s*:\s*\[', buffer)
    return match.end() if match else -1


def _scan(buffer: bytes, matches: list[re.Match[bytes]], collector: Collector) -> None:
    """Decode the events between consecutive starts that the analysis uses; skip the rest
    (most of a trace: nested operators, Python frames, flow arrows) without decoding them.
    The hot loop of `dlrig profile`: kept flat on purpose."""
    routes = _ROUTES
    loads = _loads
    # Events written with another key first (Kineto's metadata events put "name" first): the
    # "ph" keys that do not open a span. One count says whether there are any; only then are
    # they found (every event has a "ph" key; an unescaped "ph" cannot be inside a string).
    others: list[int] = []
    if buffer.count(b'"ph"', matches[0].start(), matches[-1].start()) != len(matches) - 1:
        opening = {buffer.find(b'"', m.start()) for m in matches}
        others = [
            at
            for at in _find_all(buffer, b'"ph"', matches[0].start(), matches[-1].start())
            if at not in opening
        ]
    k = 0
    for i in range(len(matches) - 1):
        match = matches[i]
        start = match.start()
        end = matches[i + 1].start()
        while k < len(others) and others[k] < start:
            k += 1
        if k < len(others) and others[k] < end:
            # Another event in the span, written with another key first (an unescaped "ph"
            # cannot be inside a string): decode every object in it, the careful way.
            _decode_all(buffer[start:end], collector)
            continue
        if match.group(1) != b"X":
            continue
        category = match.group(2)
        if category is None:  # "cat" not second: look for it in the event
            found = _CAT.search(buffer, start, end)
            if found is None:
                continue
            category = found.group(1)
        route = routes.get(category)
        if route is None:
            route = routes.get(category.lower())
            if route is None:
                continue
        if route == "host":
            name = match.group(3)
            if name is None:
                found_name = _NAME.search(buffer, start, end)
                name = found_name.group(1) if found_name is not None else b""
            if not (
                name.startswith(_WANTED_HOST_NAMES)
                or buffer.find(b'"flops"', start, end) >= 0
                or buffer.find(b'"stream"', start, end) >= 0
            ):
                continue
        close = buffer.rfind(b"}", start, end) + 1
        try:
            event = loads(buffer[start:close])
        except ValueError:
            _decode_all(buffer[start:end], collector)
            continue
        if route == "host" or route == "annotation":
            collector.add(event)
            continue
        # The common case, checked inline; anything odd goes the careful way (`add`).
        try:
            t0 = float(event["ts"])
            t1 = t0 + float(event.get("dur", 0))
            name, args = event["name"], event.get("args") or {}
        except (KeyError, TypeError, ValueError, AttributeError):
            collector.add(event)
            continue
        if type(name) is not str or type(args) is not dict or not isfinite(t1) or t1 < t0:
            collector.add(event)
        elif route == "runtime":
            collector.add_launch(name, t0, t1, args, event)
        else:
            collector.add_gpu(name, route, t0, t1, args, event)


def _find_all(buffer: bytes, needle: bytes, start: int, end: int) -> list[int]:
    found = []
    at = buffer.find(needle, start, end)
    while at >= 0:
        found.append(at)
        at = buffer.find(needle, at + 1, end)
    return found


def _decode_all(span: bytes, collector: Collector) -> None:
    """Every object in `span` (events separated by commas), through the careful path; a
    damaged one ends the span, the rest of the trace still counts."""
    text = span.decode("utf-8", "replace")
    position = 0
    while True:
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
        if position >= len(text) or text[position] != "{":
            return
        try:
            event, position = _DECODER.raw_decode(text, position)
        except ValueError:
            return
        collector.add(event)


def _json_loads() -> Any:
    """orjson where installed (the `fast` extra: several times quicker on large traces)."""
    try:
        import orjson
    except ImportError:
        return json.loads
    return orjson.loads


_loads = _json_loads()
_DECODER = json.JSONDecoder()


def _finish_events(rest: bytes, collector: Collector, label: str) -> bytes:
    """Decode the events left at the end of the array (the last one, and any written with
    another key first: Kineto's instant events) and return what follows the array: the
    document's trailing keys."""
    text = rest.decode("utf-8", "replace")
    position = len(text) - len(text.lstrip())
    while position < len(text) and text[position] == "{":
        try:
            event, position = _DECODER.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise InputError(f"{label}: " + _GARBLED.format(where=""), fix=_GARBLED_FIX) from exc
        collector.add(event)
        while position < len(text) and text[position] in " \t\r\n,":
            position += 1
    if not text[position:].startswith("]"):
        raise InputError(f"{label}: " + _GARBLED.format(where=""), fix=_GARBLED_FIX)
    return text[position + 1 :].encode()


def _header(head: bytes, trailer: bytes, label: str) -> dict[str, Any]:
    """The document's keys other than traceEvents (device, rank), before and after it."""
    before = head[: head.rfind(b'"traceEvents"')].rstrip().rstrip(b",")
    after = trailer.strip().lstrip(b",").strip()
    if not after.strip(b"}"):
        text = before + b"}"
    elif before.strip() == b"{":
        text = b"{" + after
    else:
        text = before + b", " + after
    try:
        document = json.loads(text.decode("utf-8", "replace"))
    except json.JSONDecodeError:
        raise InputError(f"{label}: " + _GARBLED.format(where=""), fix=_GARBLED_FIX) from None
    return document if isinstance(document, dict) else {}


def _whole(data: bytes, label: str) -> Trace:
    """A document with no `traceEvents` array where the stream reader looks: parsed whole,
    for the message that says what it is."""
    try:
        document = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        where = f" at line {exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise InputError(f"{label}: " + _GARBLED.format(where=where), fix=_GARBLED_FIX) from None
    if not isinstance(document, dict) or not isinstance(document.get("traceEvents"), list):
        raise InputError(
            f"{label}: not a Kineto trace (JSON without a traceEvents list)",
            fix="give a trace torch.profiler wrote (export_chrome_trace or "
            "tensorboard_trace_handler)",
        )
    collector = Collector(label)
    for event in document["traceEvents"]:
        collector.add(event)
    return collector.trace(document)

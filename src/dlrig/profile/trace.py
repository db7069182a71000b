"""Reading a Kineto trace (what `torch.profiler` writes with `export_chrome_trace`) into plain,
typed events: the host's steps and operators, the runtime's launches and the GPU's kernels,
copies and sets, on NVIDIA (CUDA) and AMD (ROCm/HIP) alike.

Only what the analysis needs is kept: a trace of a few hundred MB holds millions of events
and most of them are operators nested inside other operators. Everything here is pure: bytes
in, a `Trace` out; a file that is not a Kineto trace is an `InputError` naming it.
"""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from math import isfinite
from pathlib import Path
from typing import Any, NamedTuple

from dlrig.errors import InputError
from dlrig.inputs import check_readable_file

# Kineto's categories changed names over the years (PyTorch 1.8 wrote "Kernel", "Runtime",
# "Operator"; 1.9 and newer "kernel", "cuda_runtime", "cpu_op"). Both map to one kind.
_GPU = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy", "gpu_memset": "memset"}
_GPU["memset"] = "memset"
_RUNTIME = {"cuda_runtime", "runtime", "cuda_driver", "hip_runtime", "privateuse1_runtime"}
_HOST = {"cpu_op", "operator", "user_annotation"}
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
DATALOADER_PREFIX = "enumerate(DataLoader)#"
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"
# Launch calls: the host time they take is the "CPU launch overhead" of a step.
LAUNCH_NAMES = re.compile(
    r"^(cudaLaunchKernel|cudaLaunchKernelExC|cuLaunchKernel|cuLaunchKernelEx|cudaLaunchCooperative"
    r"|cudaGraphLaunch|hipLaunchKernel|hipExtLaunchKernel|hipExtModuleLaunchKernel|hipModuleLaunch"
    r"|hipGraphLaunch|cudaMemcpyAsync|hipMemcpyAsync|hipMemcpyWithStream|cudaMemsetAsync"
    r"|hipMemsetAsync)"
)


class HostEvent(NamedTuple):
    name: str
    start: float  # µs, the trace's own clock
    end: float
    tid: int
    flops: float = 0.0  # `with_flops=True` puts the operator's FLOPs in its args


# Tuples, not dataclasses: a trace holds hundreds of thousands of these.
class GpuEvent(NamedTuple):
    name: str
    kind: str  # kernel | memcpy | memset
    start: float
    end: float
    device: int
    stream: int
    correlation: int  # joins the runtime call that launched it; -1 when absent


@dataclass(frozen=True)
class Trace:
    path: str
    rank: int | None
    world_size: int | None
    device_name: str | None
    steps: tuple[HostEvent, ...]
    host: tuple[HostEvent, ...]  # data loading, forward/backward/optimizer markers, flops
    launches: dict[int, HostEvent]  # correlation id -> runtime call
    gpu: tuple[GpuEvent, ...]
    # Starts of ProfilerStep annotations on the GPU timeline (HTA counts them as steps too).
    gpu_step_starts: tuple[float, ...] = ()
    # Host events that carry a stream (Triton launches recorded as cpu_op): HTA's breakdown
    # counts every event with a stream as GPU work; kept only to compute its figure its way.
    stream_extras: tuple[GpuEvent, ...] = ()
    backend: str | None = None  # NCCL, RCCL, gloo from distributedInfo
    # The trace's clock in Unix µs: `ts` + this (Kineto's baseTimeNanoseconds; older traces
    # wrote Unix µs directly). None when the trace does not say.
    base_unix_us: float | None = None
    vendor: str = "unknown"  # nvidia | amd | unknown (from the runtime's names)
    notes: tuple[str, ...] = field(default=())


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
    **{c.encode(): kind for c, kind in _GPU.items()},
    **{c.encode(): "runtime" for c in _RUNTIME},
    **{c.encode(): "host" for c in _HOST},
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
    collector = _Collector(label)
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


def _scan(buffer: bytes, matches: list[re.Match[bytes]], collector: _Collector) -> None:
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
        if route == "runtime":
            collector.runtime(event)
        elif route == "host" or route == "annotation":
            collector.add(event)
        else:
            collector.gpu_event(event, route)


def _find_all(buffer: bytes, needle: bytes, start: int, end: int) -> list[int]:
    found = []
    at = buffer.find(needle, start, end)
    while at >= 0:
        found.append(at)
        at = buffer.find(needle, at + 1, end)
    return found


def _decode_all(span: bytes, collector: _Collector) -> None:
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


def _finish_events(rest: bytes, collector: _Collector, label: str) -> bytes:
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
    collector = _Collector(label)
    for event in document["traceEvents"]:
        collector.add(event)
    return collector.trace(document)


def _flops(value: Any) -> float:
    try:
        number = float(value or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return number if isfinite(number) and number > 0 else 0.0


def _int(value: Any, default: int = -1) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class _Collector:
    """Keeps what the analysis needs of each event, as it arrives."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.steps: list[HostEvent] = []
        self.host: list[HostEvent] = []
        self.launches: dict[int, HostEvent] = {}
        self.gpu: list[GpuEvent] = []
        self.gpu_steps: list[float] = []
        self.extras: list[GpuEvent] = []
        self.hip = False
        self.cuda = False

    def gpu_event(self, event: Any, kind: str) -> None:
        """A kernel, copy or set (the scan knows its kind)."""
        try:
            start = float(event["ts"])
            end = start + float(event.get("dur", 0))
            name = event["name"]
            if type(name) is not str or not isfinite(end) or end < start:
                self.add(event)  # odd types or values: the careful path decides
                return
            args = event.get("args") or {}
            device = args.get("device")
            stream = args.get("stream")
            correlation = args.get("correlation", -1)
            self.gpu.append(
                GpuEvent(
                    name,
                    kind,
                    start,
                    end,
                    device if type(device) is int else _int(device, _int(event.get("pid"), 0)),
                    stream if type(stream) is int else _int(stream, _int(event.get("tid"), 0)),
                    correlation if type(correlation) is int else _int(correlation),
                )
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            self.add(event)  # odd types: the careful path decides

    def runtime(self, event: Any) -> None:
        """A runtime call (the scan knows it is one): kept when it launched GPU work."""
        try:
            args = event.get("args") or {}
            correlation = args.get("correlation", -1)
            if type(correlation) is not int:
                correlation = _int(correlation)
            name = event["name"]
            if not (self.hip or self.cuda):
                self.hip = name.startswith("hip")
                self.cuda = name.startswith("cu")
            if correlation >= 0:
                start = float(event["ts"])
                end = start + float(event.get("dur", 0))
                if type(name) is not str or not isfinite(end):
                    self.add(event)
                    return
                tid = event.get("tid", 0)
                self.launches[correlation] = HostEvent(
                    name, start, end, tid if type(tid) is int else _int(tid, 0)
                )
        except (KeyError, TypeError, ValueError, AttributeError):
            self.add(event)

    def add(self, event: Any) -> None:
        if not isinstance(event, dict) or event.get("ph") != "X":
            return
        category = event.get("cat")
        category = category.lower() if isinstance(category, str) else ""
        try:
            start = float(event["ts"])
            end = start + float(event.get("dur", 0.0))
        except (KeyError, TypeError, ValueError):
            return
        if not isfinite(end) or end < start:  # 1e400 parses as infinity; NaN is not a time
            return
        name = event.get("name")
        if not isinstance(name, str):
            name = str(name)
        args = event.get("args")
        if not isinstance(args, dict):
            args = {}
        # Hot path (hundreds of thousands of events): ints checked inline, converted rarely.
        kind = _GPU.get(category)
        if kind is not None:
            device = args.get("device")
            stream = args.get("stream")
            correlation = args.get("correlation", -1)
            self.gpu.append(
                GpuEvent(
                    name,
                    kind,
                    start,
                    end,
                    device if type(device) is int else _int(device, _int(event.get("pid"), 0)),
                    stream if type(stream) is int else _int(stream, _int(event.get("tid"), 0)),
                    correlation if type(correlation) is int else _int(correlation),
                )
            )
        elif category in _RUNTIME:
            correlation = args.get("correlation", -1)
            if type(correlation) is not int:
                correlation = _int(correlation)
            if correlation >= 0:
                tid = event.get("tid", 0)
                self.launches[correlation] = HostEvent(
                    name, start, end, tid if type(tid) is int else _int(tid, 0)
                )
            if not (self.hip or self.cuda):
                self.hip = name.startswith("hip")
                self.cuda = name.startswith("cu")
        elif category == "gpu_user_annotation":
            if STEP_NAME.match(name):
                self.gpu_steps.append(start)
        elif category in _HOST:
            if "stream" in args and _int(args.get("stream")) >= 0:
                self.extras.append(
                    GpuEvent(
                        name,
                        "kernel",
                        start,
                        end,
                        0,
                        _int(args["stream"]),
                        _int(args.get("correlation")),
                    )
                )
            if STEP_NAME.match(name):
                self.steps.append(HostEvent(name, start, end, _int(event.get("tid"), 0)))
            elif (
                name.startswith(DATALOADER_PREFIX)
                or name.startswith(OPTIMIZER_PREFIXES)
                or name.startswith(BACKWARD_PREFIX)
                or "flops" in args
            ):
                self.host.append(
                    HostEvent(
                        name, start, end, _int(event.get("tid"), 0), _flops(args.get("flops"))
                    )
                )

    def trace(self, document: dict[str, Any]) -> Trace:
        info = document.get("distributedInfo")
        info = info if isinstance(info, dict) else {}
        devices = document.get("deviceProperties")
        device_name = None
        if isinstance(devices, list) and devices and isinstance(devices[0], dict):
            device_name = str(devices[0].get("name") or "") or None
        notes: list[str] = []
        steps = _unique_steps(self.steps, notes)
        base = document.get("baseTimeNanoseconds")
        base_unix_us: float | None = None
        if isinstance(base, int | float) and base > 0:
            base_unix_us = base / 1000.0
        elif steps and steps[0].start > 1e15:  # already Unix µs (2001 onwards)
            base_unix_us = 0.0
        return Trace(
            path=self.label,
            rank=_int(info["rank"]) if "rank" in info else None,
            world_size=_int(info["world_size"]) if "world_size" in info else None,
            device_name=device_name,
            steps=tuple(steps),
            host=tuple(sorted(self.host, key=lambda e: e.start)),
            launches=self.launches,
            gpu=tuple(sorted(self.gpu, key=lambda e: e.start)),
            gpu_step_starts=tuple(self.gpu_steps),
            stream_extras=tuple(self.extras),
            backend=str(info["backend"]) if info.get("backend") else None,
            vendor="amd" if self.hip else "nvidia" if self.cuda else "unknown",
            notes=tuple(notes),
            base_unix_us=base_unix_us,
        )


def _unique_steps(steps: list[HostEvent], notes: list[str]) -> list[HostEvent]:
    """Steps in time order. Two annotations of one step number (a profiler restarted with
    `repeat`, or a warm-up step recorded twice) are both kept, numbered apart, and said."""
    steps.sort(key=lambda e: e.start)
    seen: dict[str, int] = {}
    out = []
    for step in steps:
        count = seen.get(step.name, 0)
        seen[step.name] = count + 1
        if count:
            notes.append(f"{step.name} appears {count + 1} times (a restarted profiler schedule)")
        out.append(step)
    return out

"""Kernel log text (`dmesg`, `dmesg -T`, `journalctl -k`) -> Xid events and driver facts."""

from __future__ import annotations

import re

from dlrig.knowledge.xid import XID_LINE
from dlrig.machine.model import Driver, KernelLog, Machine, Origin, XidEvent
from dlrig.machine.readers.common import recorded_only_issues

_TIMESTAMP = re.compile(r"^\s*\[(?P<ts>[^\]]+)\]")
_JOURNAL_TS = re.compile(r"^(?P<ts>\w{3} \d{1,2} \d{2}:\d{2}:\d{2})")
_MODULE = re.compile(r"NVRM: loading NVIDIA UNIX [\w-]+ Kernel Module\s+(?P<version>[\d.]+)")


def event_unix(timestamp: str | None, now_unix: float | None = None) -> float | None:
    """The wall-clock time of a kernel-log timestamp, where the line carries one.

    `dmesg -T` ("Sun Feb 23 16:24:18 2025") and ISO stamps are absolute; a syslog stamp
    ("Feb 23 16:24:18") has no year, so it is the latest such moment not in the future. A plain
    dmesg stamp ("1843.308145", seconds since boot) says nothing about the wall clock: None.
    Times are read as UTC (the log does not say its zone)."""
    import datetime as dt
    import time

    if not timestamp:
        return None
    text = " ".join(timestamp.split())
    now = dt.datetime.fromtimestamp(now_unix if now_unix is not None else time.time(), dt.UTC)
    for pattern in ("%a %b %d %H:%M:%S %Y", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S"):
        try:
            parsed = dt.datetime.strptime(text.split(",")[0].split(".")[0], pattern)
        except ValueError:
            continue
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)).timestamp()
    try:
        parsed = dt.datetime.strptime(f"{now.year} {text}", "%Y %b %d %H:%M:%S")
    except ValueError:
        return None
    parsed = parsed.replace(tzinfo=dt.UTC)
    if parsed > now:
        parsed = parsed.replace(year=now.year - 1)
    return parsed.timestamp()


def xid_events(lines: list[str] | tuple[str, ...]) -> tuple[XidEvent, ...]:
    events = []
    for line in lines:
        match = XID_LINE.search(line)
        if not match:
            continue
        ts = _TIMESTAMP.match(line) or _JOURNAL_TS.match(line)
        pid_text = (match.group("pid") or "").strip("'<>")
        pci = match.group("pci") or ""
        events.append(
            XidEvent(
                code=int(match.group("code")),
                pci_bus_id=pci.removeprefix("PCI:") or None,
                message=match.group("message").strip() or None,
                timestamp=ts.group("ts").strip() if ts else None,
                process_name=(match.group("name") or "").strip() or None,
                pid=int(pid_text) if pid_text.isdigit() else None,
            )
        )
    return tuple(events)


# What a kernel log line starts with: a dmesg timestamp ("[ 1843.308145]"), a dmesg -T one
# ("[Sun Feb 23 16:24:18 2025]"), a syslog/journalctl prefix ("Feb 23 16:24:18 host kernel:",
# localised months too: "april 24 16:22:15 host kernel:"), a bare "kernel: " prefix,
# an ISO one (journalctl -o short-iso), or -- with timestamps off or on a continuation line --
# the NVRM: prefix itself.
_KERNEL_LINE = re.compile(
    r"^\s*(?:"
    r"\[\s*\d+\.\d+\]"
    r"|\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \w{3}\s+\d{1,2} \d{2}:\d{2}:\d{2} \d{4}\]"
    r"|[A-Za-z]{3,10}\.?\s+\d{1,2}\s+\d{2}:\d{2}:\d{2}\s+\S+\s+\S+?(?:\[\d+\])?:"
    r"|\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\S*\s+\S+\s+\S+?(?:\[\d+\])?:"
    r"|(?:kernel: )?NVRM: "
    r"|kernel: "
    r")"
)
# journalctl's own lines ("-- Logs begin at ...", "-- Boot 3f2a... --") carry no kernel text.
_JOURNAL_NOTE = re.compile(r"^-- .* --?$|^-- (Logs begin|No entries|Journal begins)")


def is_kernel_line(line: str) -> bool:
    return bool(_KERNEL_LINE.match(line))


def looks_like(text: str) -> bool:
    """A kernel log by its line shape: most lines carry a kernel-log prefix.

    A README or Markdown file that mentions `NVRM: Xid` in prose or in a short code block is
    mostly other lines, so it is not read as a log whatever words it contains.
    """
    lines = [
        line
        for line in text[:400_000].splitlines()[:5000]
        if line.strip() and not _JOURNAL_NOTE.match(line.strip())
    ]
    if not lines:
        return False
    shaped = sum(1 for line in lines if is_kernel_line(line))
    return shaped >= 1 and shaped * 2 >= len(lines)


def read(text: str, path: str | None) -> Machine:
    lines = text.splitlines()
    events = xid_events(lines)
    module = next((m for m in (_MODULE.search(line) for line in lines) if m), None)
    present = ["kernel_log"]
    driver = None
    if module:
        driver = Driver(kernel_module_version=module.group("version"), kernel_module_loaded=True)
        present.append("driver")
    return Machine(
        origin=Origin(kind="kernel-log", path=path, detail=f"{len(events)} Xid events"),
        driver=driver,
        kernel_log=KernelLog(xid_events=events, source="file"),
        probe_issues=recorded_only_issues("kernel log", tuple(present)),
    )

"""Kernel log text (`dmesg`, `dmesg -T`, `journalctl -k`) -> Xid events and driver facts."""

from __future__ import annotations

import re

from dlrig.knowledge.xid import XID_LINE
from dlrig.machine.model import Driver, KernelLog, Machine, Origin, XidEvent
from dlrig.machine.readers.common import recorded_only_issues

_TIMESTAMP = re.compile(r"^\s*\[(?P<ts>[^\]]+)\]")
_JOURNAL_TS = re.compile(r"^(?P<ts>\w{3} \d{1,2} \d{2}:\d{2}:\d{2})")
_MODULE = re.compile(r"NVRM: loading NVIDIA UNIX [\w-]+ Kernel Module\s+(?P<version>[\d.]+)")


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


def looks_like(text: str) -> bool:
    head = text[:200_000]
    return "NVRM:" in head or bool(re.search(r"^\s*\[\s*\d+\.\d+\]", head, re.M))


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

"""NVIDIA Xid codes: what each means, who is likely at fault, how severe, what to do.

The kernel log line format (`NVRM: Xid (PCI:0000:9b:00): 119, pid=..., name=..., text`) is
knowledge too: both the machine probe (reading dmesg) and `diagnose` (reading pasted logs)
parse it with `XID_LINE`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from dlrig.knowledge.tables import record, rows, split_list

XID_LINE = re.compile(
    r"NVRM: Xid \((?P<pci>PCI:[0-9a-fA-F:.]+|[^)]*)\):\s*(?P<code>\d+)"
    r"(?:,\s*pid=(?P<pid>'?<?\w+>?'?))?(?:,\s*name=(?P<name>[^,]*))?,?\s*(?P<message>.*)"
)

SEVERITIES = ("info", "warn", "critical")


@dataclass(frozen=True)
class XidInfo:
    code: int
    name: str
    description: str
    culprits: tuple[str, ...]  # application | driver | hardware | system | user; () = unmarked
    severity: str
    action: str
    source: str
    as_of: str


@functools.cache
def table() -> dict[int, XidInfo]:
    result = {}
    for row in rows("xid"):
        info = record(
            "xid", XidInfo, row, {"severity": SEVERITIES}, culprits=split_list(row["culprit"])
        )
        result[info.code] = info
    return result


def lookup(code: int) -> XidInfo | None:
    return table().get(code)

"""What a health check remembers between runs: the kernel-log events it has read, and the faults
they opened, per boot.

The kernel log of this boot is read every time, but an event counts once: a hardware Xid opens a
fault that stays open until the node reboots (the GPU reset that clears it comes with a new boot
id) or a person clears it (`dlrig health --clear`); it is never read again from the whole log
history (the classic pitfall of grepping syslog: a node kept out until log rotation).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from dlrig.health.checks import Fault
from dlrig.outputs import write_text_atomic

VERSION = 1


@dataclass(frozen=True)
class State:
    boot_id: str | None = None
    seen: frozenset[str] = frozenset()  # event keys already read
    open_faults: tuple[Fault, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, object]:
        return {
            "version": VERSION,
            "boot_id": self.boot_id,
            "seen": sorted(self.seen),
            "open_faults": [f.to_dict() for f in self.open_faults],
        }


def load(path: Path | None) -> State:
    """The state a previous check left, or a fresh one (absent, unreadable, another version: a
    check must run even when its memory is gone)."""
    if path is None or not path.is_file():
        return State()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return State()
    if not isinstance(raw, dict) or raw.get("version") != VERSION:
        return State()
    faults = []
    for item in raw.get("open_faults") or ():
        if isinstance(item, dict) and isinstance(item.get("check"), str):
            faults.append(
                Fault.of(
                    str(item["check"]),
                    str(item.get("title", "")),
                    tuple(str(e) for e in item.get("evidence") or ()),
                    bool(item.get("drain", True)),
                    item.get("cause") if isinstance(item.get("cause"), str) else None,
                    item.get("gpu") if isinstance(item.get("gpu"), int) else None,
                )
            )
    boot = raw.get("boot_id")
    return State(
        boot_id=boot if isinstance(boot, str) else None,
        seen=frozenset(str(k) for k in raw.get("seen") or ()),
        open_faults=tuple(faults),
    )


def save(path: Path | None, state: State) -> str | None:
    """Write the state; the reason when it cannot be written (the check's answer stands: only
    the next check loses its memory of the events read)."""
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(state.to_dict(), indent=1) + "\n", mode=0o644)
    except OSError as exc:
        return f"state not saved to {path}: {exc.strerror or exc}"
    return None

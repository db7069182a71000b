"""The live view's keys: select a process, sort, tree, and signal it after a confirmation.

A pure state machine: `ViewState.press(key, pids)` takes one key (as the terminal sends it) and
the pids the process list shows, in order, and returns what to do, if anything. The terminal
(raw keys) and the signal itself belong to the CLI and `dlrig.machine.host_processes`.

    ↑ ↓      select a process          s   next sort order
    t        tree (children under their parent)
    T K I    SIGTERM / SIGKILL / SIGINT the selected process: asks "y" first
    q        quit
"""

from __future__ import annotations

import dataclasses
import signal
from dataclasses import dataclass

from dlrig.monitor.processes import SORT_KEYS, ProcessOptions, Row

UP, DOWN = ("\x1b[A", "\x1bOA"), ("\x1b[B", "\x1bOB")
SIGNALS = {"T": signal.SIGTERM, "K": signal.SIGKILL, "I": signal.SIGINT}
HELP = "keys: ↑↓ select · s sort · t tree · T/K/I signal the selected process · q quit"


@dataclass(frozen=True)
class Send:
    """Send `signum` to `pid`, the process that started at `started_unix` (confirmed)."""

    pid: int
    signum: int
    started_unix: float


@dataclass
class ViewState:
    options: ProcessOptions
    can_signal: bool  # live processes of this machine; never a replay's
    selected: tuple[int, int] | None = None  # (GPU, pid): a pid can be on several GPUs
    confirming: Send | None = None
    message: str | None = None
    quit: bool = False

    def is_selected(self, row: Row) -> bool:
        return self.selected == (row.gpu, row.pid)

    def press(self, key: str, rows: list[Row]) -> Send | None:
        """Apply one key, given the rows the list shows; a confirmed signal comes back."""
        self.message = None
        if self.confirming is not None:
            asked, self.confirming = self.confirming, None
            if key in ("y", "Y"):
                return asked
            self.message = "not sent"
            return None
        if key == "q":
            self.quit = True
        elif key == "s":
            after = SORT_KEYS[(SORT_KEYS.index(self.options.sort) + 1) % len(SORT_KEYS)]
            self.options = dataclasses.replace(self.options, sort=after)
        elif key == "t":
            self.options = dataclasses.replace(self.options, tree=not self.options.tree)
        elif key in UP or key in DOWN:
            self._move(-1 if key in UP else 1, rows)
        elif key in SIGNALS:
            self._ask(SIGNALS[key], rows)
        return None

    def _move(self, step: int, rows: list[Row]) -> None:
        keys = [(row.gpu, row.pid) for row in rows]
        if not keys:
            self.selected = None
        elif self.selected not in keys:
            self.selected = keys[0] if step > 0 else keys[-1]
        else:
            index = keys.index(self.selected) + step
            self.selected = keys[max(0, min(index, len(keys) - 1))]

    def _ask(self, signum: int, rows: list[Row]) -> None:
        name = signal.Signals(signum).name
        row = next((r for r in rows if self.is_selected(r)), None)
        if not self.can_signal:
            self.message = f"no {name} sent: a replay's processes are not on this machine"
        elif row is None:
            self.message = f"select a process first (↑ ↓), then press the key for {name}"
        elif row.started_unix is None:
            # NVML gives host pids; from inside a container that number is someone else here.
            self.message = f"no {name} sent: pid {row.pid} is not a process this host can see"
        else:
            self.confirming = Send(row.pid, signum, row.started_unix)

    def status(self) -> str:
        """The line under the view: a question, the last outcome, or the keys."""
        if self.confirming is not None:
            name = signal.Signals(self.confirming.signum).name
            return f"send {name} to pid {self.confirming.pid}? y to confirm, any other key cancels"
        tree = ", tree" if self.options.tree else ""
        return self.message or f"{HELP}   [sort: {self.options.sort}{tree}]"

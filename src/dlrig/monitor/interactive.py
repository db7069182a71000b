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

from dlrig.monitor.processes import SORT_KEYS, ProcessOptions

UP, DOWN = ("\x1b[A", "\x1bOA"), ("\x1b[B", "\x1bOB")
SIGNALS = {"T": signal.SIGTERM, "K": signal.SIGKILL, "I": signal.SIGINT}
HELP = "keys: ↑↓ select · s sort · t tree · T/K/I signal the selected process · q quit"


@dataclass(frozen=True)
class Send:
    """Send `signum` to `pid` (confirmed by the user)."""

    pid: int
    signum: int


@dataclass
class ViewState:
    options: ProcessOptions
    can_signal: bool  # live processes of this machine; never a replay's
    selected: int | None = None  # pid
    confirming: Send | None = None
    message: str | None = None
    quit: bool = False

    def press(self, key: str, pids: list[int]) -> Send | None:
        """Apply one key; a confirmed signal comes back to be sent."""
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
            self._move(-1 if key in UP else 1, pids)
        elif key in SIGNALS:
            self._ask(SIGNALS[key], pids)
        return None

    def _move(self, step: int, pids: list[int]) -> None:
        if not pids:
            self.selected = None
            return
        if self.selected not in pids:
            self.selected = pids[0] if step > 0 else pids[-1]
            return
        index = pids.index(self.selected) + step
        self.selected = pids[max(0, min(index, len(pids) - 1))]

    def _ask(self, signum: int, pids: list[int]) -> None:
        name = signal.Signals(signum).name
        if not self.can_signal:
            self.message = f"no {name} sent: a replay's processes are not on this machine"
        elif self.selected is None or self.selected not in pids:
            self.message = f"select a process first (↑ ↓), then press the key for {name}"
        else:
            self.confirming = Send(self.selected, signum)

    def status(self) -> str:
        """The line under the view: a question, the last outcome, or the keys."""
        if self.confirming is not None:
            name = signal.Signals(self.confirming.signum).name
            return f"send {name} to pid {self.confirming.pid}? y to confirm, any other key cancels"
        tree = ", tree" if self.options.tree else ""
        return self.message or f"{HELP}   [sort: {self.options.sort}{tree}]"

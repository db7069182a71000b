"""What a run says: every automatic decision once, progress on rank 0, all of it recorded.

A library that decides things for the user (the precision, the sampler, the micro-batch after an
OOM) must say so, once, where the user looks: stderr of rank 0, prefixed `dlrig.train:`. Events
that belong to one rank (its OOM) are printed by that rank with its number. Every line is also
kept in `decisions`, so the end-of-run summary and the `--json` document carry them.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from dlrig.units import human_seconds


@dataclass(frozen=True)
class Decision:
    key: str
    text: str
    step: int
    rank: int

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "text": self.text, "step": self.step, "rank": self.rank}


class RunLog:
    """Rank-aware, log-once messages and the one-line progress display."""

    def __init__(
        self, rank: int, world_size: int, quiet: bool = False, stream: TextIO | None = None
    ) -> None:
        self.rank = rank
        self.world_size = world_size
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.decisions: list[Decision] = []
        self._said: set[str] = set()
        self._progress_open = False
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def _prefix(self, everywhere: bool) -> str:
        if everywhere and self.world_size > 1:
            return f"dlrig.train[rank {self.rank}]: "
        return "dlrig.train: "

    def _write(self, line: str) -> None:
        if self.quiet:
            return
        try:
            if self._progress_open:
                # Finish the progress line first so a decision never lands in the middle of it.
                self.stream.write("\n")
                self._progress_open = False
            self.stream.write(line + "\n")
            self.stream.flush()
        except OSError:
            # The terminal is gone (SIGHUP): the run, and its checkpoint, must go on without it.
            pass

    def say_from_signal_handler(self, text: str) -> None:
        """Rank 0's line from inside a signal handler: straight to the file descriptor, since
        the handler may interrupt a write to the same buffered stream (a reentrant call)."""
        if self.quiet or self.rank != 0:
            return
        try:
            fd = self.stream.fileno()
            os.write(
                fd, (("\n" if self._progress_open else "") + "dlrig.train: " + text + "\n").encode()
            )
        except (OSError, ValueError, AttributeError):
            return
        self._progress_open = False

    def decide(self, key: str, text: str, step: int = 0, everywhere: bool = False) -> None:
        """Record a decision once per key; rank 0 prints it (every rank when `everywhere`)."""
        if key in self._said:
            return
        self._said.add(key)
        self.decisions.append(Decision(key, text, step, self.rank))
        if everywhere or self.rank == 0:
            self._write(self._prefix(everywhere) + text)

    def say(self, text: str, everywhere: bool = False) -> None:
        """A message that is not a decision (resuming, a checkpoint written): printed, not kept."""
        if everywhere or self.rank == 0:
            self._write(self._prefix(everywhere) + text)

    def progress(self, text: str) -> None:
        """Rank 0's one line: rewritten in place on a terminal, one line per call otherwise."""
        if self.quiet or self.rank != 0:
            return
        try:
            if self._tty:
                self.stream.write("\r\x1b[2K" + text)
                self._progress_open = True
            else:
                self.stream.write(text + "\n")
            self.stream.flush()
        except OSError:
            pass

    def close_progress(self) -> None:
        if self._progress_open:
            self._progress_open = False
            try:
                self.stream.write("\n")
                self.stream.flush()
            except OSError:
                pass


def format_seconds(seconds: float) -> str:
    """Like `human_seconds` up to two minutes; a clock time (HH:MM:SS) above."""
    if seconds < 120:
        return human_seconds(seconds)
    return time.strftime("%H:%M:%S", time.gmtime(seconds))

"""What every burn-in load worker shares: the JSON lines it prints, its per-interval meter and
the loop that stops when the time is up or the parent is gone. The CPU worker (`worker`) and the
GPU one (`worker_gpu`, which imports torch) both stand on it, and neither on the other."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable


def emit(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


class Meter:
    """What the worker did since its last report: amounts per second, and plain counts."""

    def __init__(self) -> None:
        self.since = time.monotonic()
        self._rates: dict[str, float] = {}
        self._counts: dict[str, float] = {}

    def rate(self, name: str, amount: float) -> None:
        self._rates[name] = self._rates.get(name, 0.0) + amount

    def count(self, name: str, amount: float = 1.0) -> None:
        self._counts[name] = self._counts.get(name, 0.0) + amount

    def report(self) -> None:
        now = time.monotonic()
        seconds = max(now - self.since, 1e-6)
        metrics = {name: round(value / seconds, 3) for name, value in self._rates.items()}
        metrics.update(self._counts)
        emit({"t": time.time(), "metrics": metrics})
        self.since = now
        self._rates.clear()
        self._counts.clear()


def run_loop(seconds: float, interval: float, step: Callable[[Meter], None]) -> None:
    """Call `step` until `seconds` pass or the parent is gone, reporting every `interval`."""
    parent = os.getppid()
    meter = Meter()
    deadline = meter.since + seconds
    next_report = meter.since + interval
    while time.monotonic() < deadline:
        if os.getppid() != parent:
            return  # the parent died: never leave load running behind it
        step(meter)
        now = time.monotonic()
        if now >= next_report:
            meter.report()
            # A fixed rate from the start: the k-th reports of all workers of one kind cover
            # the same stretch of time, and dlrig adds them up report by report.
            next_report += interval
            if next_report <= now:
                next_report = now + interval

"""How a dlrig process stops: SIGINT, SIGTERM and SIGHUP become one exception, everywhere.

`install()` runs once in `dlrig.cli.main`. From then on each of the three signals raises
`Stopped` in the main thread, *whatever disposition the process inherited*: a job started in
the background with SIGINT ignored, or by a supervisor that ignores SIGHUP, still stops on it.
Because it is an exception, every `with`/`finally` on the way out runs: temporary files are
removed, NVML is shut down, rich's live display gives the terminal back, and `cli.main` exits
with 128 + the signal number (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP), as a shell
reports a process killed by that signal.

Long-running loops that sleep on an `Event` get the exception from inside `wait()` (lock waits
are interruptible on POSIX), so there is nothing to poll. Code that must do something other than
stop on a signal (`diagnose -- CMD` forwards it to its child) uses `handling()` for the time
it needs, and the dlrig handler comes back afterwards.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(BaseException):
    """A stop signal arrived. BaseException, so `except Exception` in library code lets it by."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


def install() -> None:
    """Make SIGINT, SIGTERM and SIGHUP raise `Stopped` (only from the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in STOP_SIGNALS:
        signal.signal(signum, _raise)


@contextlib.contextmanager
def handling(handler: Callable[[int], None]) -> Iterator[None]:
    """Call `handler(signum)` on a stop signal instead of raising, for the block's duration."""

    def call(signum: int, frame: FrameType | None) -> None:
        handler(signum)

    previous = {signum: signal.signal(signum, call) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)

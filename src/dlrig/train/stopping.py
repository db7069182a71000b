"""Stop signals during a run (`save_on_sigterm=True`): a checkpoint, then the exit.

SIGTERM (Slurm preemption, a spot reclaim, `docker stop`), SIGINT (Ctrl-C) and SIGHUP (the
terminal went away) all do the same: the step that is running finishes, a checkpoint of it
is written, and the process exits with 128 + the signal's number (143, 130, 129), which a
resume continues from bit for bit.

The same signal often arrives more than once: a Ctrl-C at a terminal reaches every process of
the foreground group, and a launcher in that group (torchrun's agent) forwards what it got to
its workers as well. So a repeat is ignored, with one exception: a SIGINT `INSIST_AFTER_S` or
more after the first is a user pressing Ctrl-C again, and it stops the process at once
(KeyboardInterrupt) without waiting for the step and the checkpoint.

The handlers are Python's own (they run in the main thread between bytecodes) and installed
only while the run is open; the previous ones come back in `restore`.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

from dlrig.train.checkpoint import step_dir_name
from dlrig.train.log import RunLog
from dlrig.train.summary import hand_to_launcher, summarize

if TYPE_CHECKING:
    from dlrig.train.run import Run

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
INSIST_AFTER_S = 2.0


class StopSignals:
    """Remembers the first stop signal; `on_first` tells the step engine to stop at once."""

    def __init__(self, on_first: Callable[[int], None]) -> None:
        self.on_first = on_first
        self.signum: int | None = None
        self._first_at = 0.0
        self._previous: dict[int, Any] = {}

    @property
    def name(self) -> str | None:
        return signal.Signals(self.signum).name if self.signum is not None else None

    def install(self, log: RunLog) -> bool:
        """Take over the three signals, and say so; False (nothing done) outside the main
        thread, where Python cannot install a handler."""
        if threading.current_thread() is not threading.main_thread():
            log.decide("sigterm", "save_on_sigterm: not installed (not the main thread)")
            return False
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        log.decide(
            "sigterm",
            "SIGTERM (Slurm preemption, spot reclaim), SIGINT (Ctrl-C) and SIGHUP write a "
            "checkpoint at the end of the current step, then exit with 128+N (143, 130, 129)",
        )
        return True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.signum is None:
            self.signum = signum
            self._first_at = now
            self.on_first(signum)
            return
        if signum == signal.SIGINT and now - self._first_at >= INSIST_AFTER_S:
            self.restore()
            raise KeyboardInterrupt

    def restore(self) -> None:
        """Give the signals back to whatever handled them before the run."""
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def announce(log: RunLog, signum: int) -> None:
    """What the first stop signal does, said at once (from inside the handler)."""
    again = " (Ctrl-C again to stop now, without it)" if signum == signal.SIGINT else ""
    log.say_from_signal_handler(
        f"{signal.Signals(signum).name}: a checkpoint at the end of this step, then exit "
        f"{128 + signum}{again}"
    )


def exit_with_checkpoint(run: Run, signum: int) -> NoReturn:
    """The checkpoint of this step (unless a periodic one just wrote it), then the exit;
    `dlrig train` gets the summary, which says where the checkpoint is."""
    step = run.steps
    saved = run.last_checkpoint
    if saved is None or saved.name != step_dir_name(step):
        saved = run.save()
    name = signal.Signals(signum).name
    run.log.say(
        f"{name}: checkpoint of step {step} written to {saved}; exiting with {128 + signum}",
        everywhere=run.world.distributed,
    )
    run.stopped_by = name
    if run.is_main:
        hand_to_launcher(summarize(run), run.log)
    run.close()
    raise SystemExit(128 + signum)

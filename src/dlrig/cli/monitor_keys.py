"""Keys from the terminal for the live view, without waiting for Enter.

The terminal goes to cbreak mode for the view's lifetime (keys arrive one by one, not echoed;
Ctrl-C still sends SIGINT) and is put back however the view ends: a key, a signal, an error.
Off a terminal (stdin a pipe or /dev/null) there are no keys and the view only redraws.
"""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Callable, Iterator


def split_keys(text: str) -> list[str]:
    """Keys typed faster than they were read arrive together: "\x1b[B\x1b[Bs" is ↓ ↓ s."""
    out: list[str] = []
    at = 0
    while at < len(text):
        width = 3 if text.startswith(("\x1b[", "\x1bO"), at) and at + 2 < len(text) else 1
        out.append(text[at : at + width])
        at += width
    return out


def _foreground(fd: int) -> bool:
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:  # a terminal that is not our controlling one: no job control to stop us
        return True


@contextlib.contextmanager
def keys() -> Iterator[Callable[[float], list[str]]]:
    """`read(timeout)`: the keys typed (an escape sequence for an arrow), [] after timeout."""
    stdin = sys.stdin
    # Off a terminal, or in the background (`dlrig monitor &`: changing the terminal's mode
    # from there stops the job with SIGTTOU), there are no keys.
    if stdin is None or not stdin.isatty() or not _foreground(stdin.fileno()):

        def wait(timeout: float) -> list[str]:
            time.sleep(timeout)
            return []

        yield wait
        return
    import termios
    import tty

    fd = stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)
    try:

        def read(timeout: float) -> list[str]:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return []
            return split_keys(os.read(fd, 64).decode("utf-8", "replace"))

        yield read
    finally:
        # A hung-up terminal cannot be put back; the stop it caused must still come through.
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)

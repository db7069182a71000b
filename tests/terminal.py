"""A command run with a pseudo-terminal as its controlling terminal, as a shell runs it.

Typing Ctrl-C (`type(b"\\x03")`) then makes the kernel's terminal driver send SIGINT to the
whole foreground process group, exactly as at a real terminal: the signal arrives with
si_code SI_KERNEL, not from kill(2).
"""

from __future__ import annotations

import fcntl
import os
import select
import subprocess
import termios
import time
from pathlib import Path

TIMEOUT_S = 120


class Terminal:
    """`argv` in a new session whose controlling terminal is a fresh pty."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.master, slave = os.openpty()

        def become_session_leader_of_the_pty() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.process = subprocess.Popen(
            argv,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            cwd=cwd,
            preexec_fn=become_session_leader_of_the_pty,
        )
        os.close(slave)
        self.output = b""

    def _read(self, timeout: float) -> bytes | None:
        """What arrived within `timeout` (b"" if nothing), None once the terminal is closed."""
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return b""
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: every process holding the terminal has exited
            return None
        self.output += data
        return data or None

    def wait_for_line(self, wanted: str) -> None:
        """Until a whole line `wanted` was written (the pty ends lines with CR LF)."""
        self.wait_for_text(f"\n{wanted}\r\n", start_of_line=True)

    def wait_for_text(self, wanted: str, start_of_line: bool = False) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while wanted.encode() not in (b"\n" if start_of_line else b"") + self.output:
            if time.monotonic() > deadline or self._read(1.0) is None:
                self.process.kill()
                raise AssertionError(f"no {wanted!r} in {self.output.decode()[-2000:]}")

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def wait(self) -> int:
        """The exit code, once the command ended; what it wrote is in `output`."""
        deadline = time.monotonic() + TIMEOUT_S
        while self.process.poll() is None and time.monotonic() < deadline:
            self._read(0.2)
        while self._read(0.05):
            pass
        os.close(self.master)
        return self.process.wait(timeout=10)

"""Run a user's command, pass its output through unchanged, and see every byte of it (`run`),
or only supervise it (`supervise`, for `dlrig train -- CMD`): the one place dlrig starts and
watches a user's command.

`dlrig diagnose -- CMD` and `dlrig profile -- CMD` sit between a training job and the user's
terminal, pipe or log collector. They must never change how the job behaves or ends:

- Where our stdout is a terminal the command gets a pseudo-terminal, so its colours, `\\r`
  progress bars and line buffering are what they would be without dlrig.
- When the reader of our stdout goes away (`... | head`), the command is not blocked on a full
  pipe: dlrig keeps draining its output (and still diagnoses it) and stops only writing it.
- dlrig returns when the command exits, even if a grandchild it left behind (`sleep 8 &`)
  still holds the pipe open: what is already in the pipe is read, then dlrig stops waiting.
- SIGINT, SIGTERM and SIGHUP sent to dlrig are forwarded to the command, which decides how to
  stop; a Ctrl-C typed at the terminal already reached the command (same process group), so
  it is not sent twice.
- The exit code is the command's own, or 128 + N when a signal N killed it, as a shell says.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import selectors
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dlrig import lifecycle
from dlrig.errors import InputError

# After the command exits, how long output may keep arriving from what it left behind before
# dlrig stops reading (a grandchild holding the pipe would otherwise hold dlrig forever).
DRAIN_AFTER_EXIT_S = 0.5
_READ_BYTES = 65536

Feed = Callable[[bytes, str], None]


@dataclass(frozen=True)
class Outcome:
    exit_code: int  # the command's code, or 128 + signal number
    stdout_closed: bool  # our stdout's reader went away while the command ran


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def _copy_window_size(from_fd: int, to_fd: int) -> None:
    with contextlib.suppress(OSError):
        size = fcntl.ioctl(from_fd, termios.TIOCGWINSZ, struct.pack("HHHH", 0, 0, 0, 0))
        fcntl.ioctl(to_fd, termios.TIOCSWINSZ, size)


def _typed_at_terminal() -> bool:
    """Whether our process group owns the terminal: then a Ctrl-C reached the command too."""
    for fd in (0, 1, 2):
        with contextlib.suppress(OSError):
            if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
                return True
    return False


class _Sink:
    """One of our output streams; after EPIPE it swallows writes instead of failing."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.closed = False

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view and not self.closed:
            try:
                written = os.write(self.fd, view)
            except BlockingIOError:
                time.sleep(0.001)
                continue
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.EBADF, errno.EIO):
                    self.closed = True
                    return
                raise
            view = view[written:]


def run(
    command: Sequence[str],
    feed: Feed,
    stdout_fd: int | None = None,
    stderr_fd: int | None = None,
    drain_after_exit_s: float = DRAIN_AFTER_EXIT_S,
    env: dict[str, str] | None = None,
) -> Outcome:
    """Run `command`, copy its stdout/stderr to ours, and call `feed(data, "stdout"|"stderr")`
    with every chunk. Returns when the command has exited. `env` replaces the environment
    the command inherits (`dlrig profile` arms its profiler through it)."""
    out_fd = sys.stdout.fileno() if stdout_fd is None else stdout_fd
    err_fd = sys.stderr.fileno() if stderr_fd is None else stderr_fd
    sinks = {"stdout": _Sink(out_fd), "stderr": _Sink(err_fd)}
    # Flush what Python buffered before the command's bytes go to the same descriptors.
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()

    master: int | None = None
    readers: dict[int, str] = {}
    if _is_terminal(out_fd):
        import pty

        master, slave = pty.openpty()
        _copy_window_size(out_fd, slave)
        child_stderr: int = slave if _is_terminal(err_fd) else subprocess.PIPE
        try:
            child = _start(command, stdout=slave, stderr=child_stderr, env=env)
        finally:
            os.close(slave)
        readers[master] = "stdout"
    else:
        child = _start(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    if child.stdout is not None:
        readers[child.stdout.fileno()] = "stdout"
    if child.stderr is not None:
        readers[child.stderr.fileno()] = "stderr"

    def forward(signum: int) -> None:
        if signum == signal.SIGINT and _typed_at_terminal():
            return  # the terminal sent it to the command's process group already
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    previous_winch = None
    if master is not None:
        pty_fd = master

        def resize(signum: int, frame: object) -> None:
            _copy_window_size(out_fd, pty_fd)

        previous_winch = signal.signal(signal.SIGWINCH, resize)
    try:
        with lifecycle.handling(forward):
            code = _pump(child, readers, sinks, feed, drain_after_exit_s)
    finally:
        if previous_winch is not None:
            signal.signal(signal.SIGWINCH, previous_winch)
        for fd in readers:
            with contextlib.suppress(OSError):
                os.close(fd)
    return Outcome(exit_code=code, stdout_closed=sinks["stdout"].closed)


def _start(
    command: Sequence[str],
    *,
    stdout: int | None,
    stderr: int | None,
    env: dict[str, str] | None,
    in_child: Callable[[], None] | None = None,
    fix: str = "check the command after --",
) -> subprocess.Popen[bytes]:
    """The one place a user's command is started (`run` and `supervise`); a command that
    cannot start is the user's input, said in one line."""
    try:
        return subprocess.Popen(
            list(command), stdout=stdout, stderr=stderr, stdin=None, env=env, preexec_fn=in_child
        )
    except FileNotFoundError:
        raise InputError(f"{command[0]}: command not found", fix=fix) from None
    except PermissionError:
        raise InputError(f"{command[0]}: permission denied", fix=fix) from None
    except OSError as exc:  # ENOEXEC and the like: a file the kernel cannot run
        raise InputError(f"{command[0]}: cannot be started ({exc.strerror})", fix=fix) from None


def _exit_code(code: int) -> int:
    """The command's exit code as a shell reports it: 128 + N when signal N killed it."""
    return code if code >= 0 else 128 - code


def _pump(
    child: subprocess.Popen[bytes],
    readers: dict[int, str],
    sinks: dict[str, _Sink],
    feed: Feed,
    drain_after_exit_s: float,
) -> int:
    selector = selectors.DefaultSelector()
    for fd, name in readers.items():
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ, name)
    exited_at: float | None = None
    try:
        while selector.get_map():
            if exited_at is None and child.poll() is not None:
                exited_at = time.monotonic()
            if exited_at is not None and time.monotonic() - exited_at > drain_after_exit_s:
                break  # what is left holds the pipe open after the command ended
            for key, _ in selector.select(timeout=0.05):
                fd, name = key.fd, str(key.data)
                try:
                    data = os.read(fd, _READ_BYTES)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    if exc.errno != errno.EIO:  # EIO: the pty's other side is closed
                        raise
                    data = b""
                if not data:
                    selector.unregister(fd)
                    continue
                sinks[name].write(data)
                feed(data, name)
    finally:
        selector.close()
    return _exit_code(child.wait())


# --- `dlrig train -- CMD`: the child started, watched, never outliving dlrig -------------------

_WATCHED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD)
_SI_KERNEL = 0x80  # siginfo.si_code of a signal the kernel sent: a terminal's Ctrl-C, a hangup
_PR_SET_PDEATHSIG = 1


def supervise(command: Sequence[str], env: dict[str, str], stdout_fd: int | None = None) -> int:
    """Start the command with its output passed through (its stdout to `stdout_fd` when
    given), forward stop signals to it, wait for it; its exit code (128+N for a signal).

    Unlike `run`, nothing is read: the command's output is the user's. The command dies with
    dlrig, even by SIGKILL (PR_SET_PDEATHSIG), so a training script that checkpoints on SIGTERM
    still does. Call it with no other thread running (the fork runs Python code)."""
    parent = os.getpid()
    prctl = _prctl()
    # Blocked before the child exists, so no signal falls between starting and watching it;
    # the child gets the mask dlrig had.
    previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, _WATCHED)

    def in_child() -> None:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(128 + signal.SIGTERM)  # dlrig died before prctl took effect

    try:
        # Checked before (check_command); what is left: a file the kernel cannot run.
        child = _start(
            command,
            stdout=stdout_fd,
            stderr=None,
            env=env,
            in_child=in_child,  # safe: the CLI has no other thread at this point
            fix=f"a Python script runs as dlrig train SCRIPT.py; another file with its "
            f"interpreter: dlrig train -- bash {command[0]}",
        )
        code = _watch(child)
        # A signal that came with the child's end is the child's: it must not stop dlrig
        # before dlrig reports the child's own exit code.
        while signal.sigtimedwait(_WATCHED, 0) is not None:
            pass
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
    return code


def _watch(child: subprocess.Popen[bytes]) -> int:
    stopped_by: int | None = None
    while True:
        info = signal.sigtimedwait(_WATCHED, 1.0)
        if info is not None and info.si_signo != signal.SIGCHLD:
            stopped_by = stopped_by or info.si_signo
            # From the terminal, the signal went to the whole foreground group, the child
            # included: a second copy would cut its checkpoint short. From kill(1), Slurm or a
            # supervisor, only dlrig got it.
            if info.si_code != _SI_KERNEL:
                with contextlib.suppress(ProcessLookupError):
                    child.send_signal(info.si_signo)
            continue
        code = child.poll()
        if code is None:
            continue
        if code < 0:
            return _exit_code(code)
        # A child that failed after a stop signal was stopped by it (torchrun exits with 1).
        return 128 + stopped_by if code != 0 and stopped_by is not None else code


def _prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up before the fork (nothing is loaded in the child)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return function

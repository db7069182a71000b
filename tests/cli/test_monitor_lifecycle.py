"""The monitor's long-running commands stop cleanly on SIGINT, SIGTERM and SIGHUP whatever the
disposition they inherited, and a server that cannot start says so at once.

Each process is started the way a background job or a supervisor starts it: with SIGINT ignored
(`preexec_fn` sets SIG_IGN, which the child inherits across exec). Before `dlrig.lifecycle`
such a live view could only be SIGKILLed, `serve` and `record` answered SIGTERM with exit 0, and
`serve --db /nonexistent/...` hung for ever. Every wait has a hard timeout, and a child still
running when a test ends is killed in `finally`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import socket
import sqlite3
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import NVSMI, ROOT

H200 = str(NVSMI / "h200-capture-idle-load.txt")
_SERVING = re.compile(r"at http://([\d.]+):(\d+)/metrics")
SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("DLRIG_DEBUG", None)
    return env


def _dlrig(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dlrig", *args],
        cwd=ROOT,
        env=_env(),
        preexec_fn=_ignore_sigint,
        **kwargs,
    )


@contextlib.contextmanager
def _reaped(process: subprocess.Popen):
    """The child never outlives the test, whatever fails."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


def _read_until(fd: int, pattern: bytes, timeout: float) -> bytes:
    """What the child wrote to the terminal until `pattern` appeared (or the deadline)."""
    data = b""
    deadline = time.monotonic() + timeout
    while pattern not in data and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            data += chunk
    return data


@pytest.mark.parametrize(("signum", "code"), SIGNALS, ids=lambda v: str(v))
def test_live_view_in_a_terminal_stops_and_gives_the_cursor_back(signum, code) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    process = _dlrig(
        "monitor", "--replay", H200, "--interval", "0.2", "--frame-seconds", "0.5",
        stdin=slave, stdout=slave, stderr=slave,
    )  # fmt: skip
    os.close(slave)
    with _reaped(process):
        shown = _read_until(master, b"H200", timeout=30)
        assert b"H200" in shown, shown[-2000:]
        assert b"\x1b[?25l" in shown  # rich hid the cursor while it draws
        process.send_signal(signum)
        rest = _read_until(master, b"stopped by", timeout=20)
        assert process.wait(timeout=20) == code
    os.close(master)
    after = (shown + rest).rsplit(b"\x1b[?25l", 1)[1]
    assert b"\x1b[?25h" in after, after[-500:]  # ... and showed it again before exiting
    assert f"stopped by {signal.Signals(signum).name}".encode() in rest
    assert b"Traceback" not in shown + rest


def _serving(process: subprocess.Popen) -> tuple[str, int]:
    assert process.stderr is not None
    banner = ""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        banner += line
        match = _SERVING.search(banner)
        if match:
            return match.group(1), int(match.group(2))
        if not line and process.poll() is not None:
            break
    raise AssertionError(f"no banner: {banner}")


@pytest.mark.parametrize(("signum", "code"), SIGNALS, ids=lambda v: str(v))
def test_serve_stops_on_each_signal_and_frees_its_port(signum, code) -> None:
    process = _dlrig(
        "monitor", "serve", "--port", "0", "--replay", H200, "--interval", "0.1",
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with _reaped(process):
        host, port = _serving(process)
        process.send_signal(signum)
        assert process.wait(timeout=20) == code
        assert process.stderr is not None
        assert f"stopped by {signal.Signals(signum).name}" in process.stderr.read()
    with socket.socket() as probe:  # nothing holds the port any more
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))


def test_serve_with_a_db_it_cannot_open_exits_at_once_with_one_line() -> None:
    process = _dlrig(
        "monitor", "serve", "--port", "0", "--replay", H200, "--db", "/nonexistent/dir/x.db",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with _reaped(process):
        _, err = process.communicate(timeout=30)  # hung for ever before the fix
    assert process.returncode == 2, err
    [line] = err.strip().splitlines()
    assert "/nonexistent/dir: no such directory" in line and "fix:" in line


@pytest.mark.parametrize(("signum", "code"), SIGNALS[:2], ids=lambda v: str(v))
def test_record_stops_on_a_signal_with_its_summary_and_no_journal_left(
    tmp_path, signum, code
) -> None:
    db = tmp_path / "history.db"
    process = _dlrig(
        "monitor", "record", "--db", str(db), "--replay", H200, "--interval", "0.05", "--json",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with _reaped(process):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _rows(db):
            time.sleep(0.1)
        process.send_signal(signum)
        out, err = process.communicate(timeout=20)
    assert process.returncode == code, err
    import json

    summary = json.loads(out)
    assert summary["stopped_by"] == signal.Signals(signum).name
    assert summary["samples_written"] == _rows(db) > 0  # every sample taken was written
    # The WAL was checkpointed into the database and SQLite removed its side files.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["history.db"]


def _rows(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(db)) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0])
    except sqlite3.OperationalError:  # tables not created yet
        return 0


def test_a_signal_releases_nvml_and_every_thread_of_the_live_view(monkeypatch) -> None:
    """In-process, with the recorded NVML binding: a real SIGTERM to this process while the
    live view waits raises Stopped, and on the way out NVML is shut down and the sampler's,
    the workers' and the Xid watcher's threads are gone."""
    from dlrig import lifecycle
    from dlrig.cli.monitor_options import SourceSettings
    from dlrig.machine import nvml as nvml_gate
    from tests.unit.test_nvml_source import RecordedNvml

    fake = RecordedNvml()
    shutdowns: list[int] = []
    fake.nvmlShutdown = lambda: shutdowns.append(1)  # type: ignore[method-assign]
    monkeypatch.setattr(nvml_gate, "_module", lambda: fake)
    from dlrig.cli import monitor_live

    settings = SourceSettings((), None, 30.0, None, 0.1, ())
    before = set(threading.enumerate())
    previous = {s: signal.getsignal(s) for s in lifecycle.STOP_SIGNALS}
    lifecycle.install()
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    try:
        timer.start()
        with pytest.raises(lifecycle.Stopped) as stopped:
            monitor_live.watch(settings, "view", None, redraw=True)
    finally:
        timer.cancel()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert stopped.value.exit_code == 143
    assert shutdowns == [1]
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [t.name for t in set(threading.enumerate()) - before if t.name.startswith("dlrig-")]
        if not left:
            break
        time.sleep(0.05)
    assert not left, left  # the sampler, the GPU worker and the Xid watcher all ended

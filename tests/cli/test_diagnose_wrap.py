"""`dlrig diagnose -- CMD` between a real command and a real pipe or terminal.

Each test here hung or failed before dlrig.wrap: the pump died on EPIPE and the command blocked
on a full pipe; a grandchild holding the pipe held dlrig; the command saw a pipe, not a
terminal. Every wait has a hard timeout, and every process is killed in `finally`.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

DLRIG = [sys.executable, "-m", "dlrig.cli.main"]


def _start(*args: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("DLRIG_DEBUG", None)
    return subprocess.Popen([*DLRIG, *args], cwd=ROOT, env=env, start_new_session=True, **kwargs)


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        process.wait(timeout=5)


def test_closed_stdout_does_not_block_the_command_and_its_code_comes_back():
    # 20 MB of output, far more than a pipe holds; the reader takes one line and leaves.
    script = "import sys\nfor i in range(400000): print('x' * 48, i)\nsys.exit(5)"
    process = _start("diagnose", "--", sys.executable, "-c", script, stdout=subprocess.PIPE,
                     stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        assert process.stdout.readline().startswith(b"x")
        process.stdout.close()  # what `| head -1` does
        assert process.wait(timeout=60) == 5
    finally:
        _kill_group(process)


def test_a_grandchild_holding_the_pipe_does_not_hold_dlrig():
    process = _start("diagnose", "--", "sh", "-c", "sleep 30 & echo started; exit 4",
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        started = time.monotonic()
        code = process.wait(timeout=15)
        assert code == 4
        assert time.monotonic() - started < 15
        assert b"started" in process.stdout.read()
    finally:
        _kill_group(process)  # the sleep is in dlrig's session: take it down too


def test_the_command_gets_a_terminal_where_stdout_is_one():
    import pty

    script = "import sys; print('TTY', sys.stdout.isatty(), sys.stderr.isatty()); sys.exit(3)"
    pid, fd = pty.fork()
    if pid == 0:  # the child: dlrig on a terminal, as a user runs it
        os.chdir(ROOT)
        os.execv(sys.executable, [*DLRIG, "diagnose", "--", sys.executable, "-c", script])
    output = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 1.0)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.close(fd)
    assert b"TTY True True" in output, output
    assert os.waitstatus_to_exitcode(status) == 3


def test_sigterm_goes_to_the_command_which_decides_how_to_stop():
    script = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('got TERM', flush=True), sys.exit(7)))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    process = _start("diagnose", "--", sys.executable, "-c", script, stdout=subprocess.PIPE,
                     stderr=subprocess.PIPE)  # fmt: skip
    try:
        assert process.stdout.readline().strip() == b"ready"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 7
        assert b"got TERM" in process.stdout.read()
    finally:
        _kill_group(process)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
def test_stop_signals_reach_the_command_even_when_dlrig_inherited_them_ignored(signum):
    script = "import time; print('ready', flush=True); time.sleep(60)"

    def ignore() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    env = dict(os.environ)
    env.pop("DLRIG_DEBUG", None)
    process = subprocess.Popen(
        [*DLRIG, "diagnose", "--", sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=ignore,  # a background job or a supervisor
    )
    try:
        assert process.stdout.readline().strip() == b"ready"
        process.send_signal(signum)
        # The command died of the signal; dlrig says so the way a shell does.
        assert process.wait(timeout=30) == 128 + signum
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait(timeout=5)


def test_options_after_the_log_and_after_double_dash_belong_to_the_command(
    run_dlrig_process, tmp_path
):
    log = tmp_path / "train.log"
    log.write_text("RuntimeError: CUDA error: out of memory\n")
    done = run_dlrig_process("diagnose", str(log), "--json")
    assert done.returncode in (0, 3), done.stderr
    assert done.stdout.lstrip().startswith("{")
    # After `--`, `--json` is the command's argument, not dlrig's.
    script = "import sys; print(sys.argv[1:]); sys.exit(0)"
    done = run_dlrig_process("diagnose", "--", sys.executable, "-c", script, "--json")
    assert done.returncode == 0
    assert "['--json']" in done.stdout


def test_an_empty_log_is_bad_input_like_everywhere_else(run_dlrig, tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    done = run_dlrig("diagnose", str(empty))
    assert done.returncode == 2
    assert "empty" in done.stderr and "Traceback" not in done.stderr
    mixed = run_dlrig("diagnose", str(empty), "--", "true")
    assert mixed.returncode == 2


def test_json_with_a_command_keeps_stdout_for_the_document_alone(run_dlrig_process):
    script = (
        "print('step 1 loss 2.3', flush=True)\n"
        "raise RuntimeError('CUDA out of memory. Tried to allocate 2.00 GiB')\n"
    )
    done = run_dlrig_process("diagnose", "--json", "--", sys.executable, "-c", script)
    assert done.returncode == 1
    document = __import__("json").loads(done.stdout)
    assert document["schema"] == "dlrig.diagnose"
    assert "step 1 loss 2.3" in done.stderr  # the command's output is still shown


def test_the_status_line_quotes_the_command_as_it_ran(run_dlrig_process):
    done = run_dlrig_process("diagnose", "--", "sh", "-c", "echo '[x]'; exit 5")
    assert done.returncode == 5
    assert "`sh -c 'echo '\"'\"'[x]'\"'\"'; exit 5'` exited with 5" in done.stderr

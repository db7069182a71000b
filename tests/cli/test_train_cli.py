"""`dlrig train` as users run it: the command's exit code, --json, options anywhere, `--`, bad
input in one line, and stop signals: forwarded once, never duplicated, and a killed dlrig
leaves neither its child running nor anything in the temporary folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.terminal import Terminal

SCRIPTS = ROOT / "tests" / "data" / "train_scripts"
TINY = str(SCRIPTS / "tiny.py")
SIGNAL_CHILD = str(SCRIPTS / "signal_child.py")
ECHO = str(SCRIPTS / "echo_args.py")
TIMEOUT_S = 300  # a process that starts torch, on a machine at a load of 10


def test_json_envelope_with_the_runs_summary_and_options_after_the_script(run_dlrig_process):
    done = run_dlrig_process("train", TINY, "--steps", "3", "--json", timeout=TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)  # the script's own stdout went to stderr
    assert list(document)[:2] == ["schema", "schema_version"]
    assert document["schema"] == "dlrig.train" and document["exit_code"] == 0
    assert document["command"] == [sys.executable, TINY, "--steps", "3"]
    summary = document["summary"]
    assert summary["steps"] == 3 and summary["samples"] == 24
    assert summary["stopped_by"] == "max_steps"
    assert set(summary["time"]) == {"total_s", "data_wait_s", "compute_s", "communication_s"}
    assert "script stdout" in done.stderr
    assert "dlrig.train: 3 steps, 24 samples" in done.stderr  # the run's own summary line


def test_double_dash_passes_everything_and_the_scripts_exit_code_comes_back(run_dlrig_process):
    # What is checked is dlrig's launcher, so the command needs no torch.
    done = run_dlrig_process(
        "train", "--", sys.executable, ECHO, "--steps", "2", "--json", "--exit", "3"
    )
    assert done.returncode == 3, done.stderr
    # Its --json, not dlrig's: every word after -- reached it, and its stdout is stdout.
    assert json.loads(done.stdout) == {"argv": ["--steps", "2", "--json", "--exit", "3"]}


def test_a_failing_command_keeps_its_code_and_json_has_no_summary(run_dlrig_process):
    done = run_dlrig_process("train", "--json", "--", sys.executable, "-c", "raise SystemExit(5)")
    assert done.returncode == 5
    document = json.loads(done.stdout)
    assert document["exit_code"] == 5 and document["summary"] is None


def test_bad_usage_is_one_line_and_exit_2(run_dlrig):
    done = run_dlrig("train")
    assert done.returncode == 2
    assert "no training command given" in done.stderr and "Traceback" not in done.stderr
    done = run_dlrig("train", "--", "no-such-program-xyz")
    assert done.returncode == 2
    assert "no-such-program-xyz: command not found" in done.stderr
    done = run_dlrig("train", "--gpus", "0", TINY)
    assert done.returncode == 2 and "--gpus 0" in done.stderr


def test_gpus_inside_a_multi_node_slurm_job_points_at_the_sbatch(run_dlrig):
    done = run_dlrig("train", "--gpus", "1", TINY, env={"SLURM_NNODES": "2"})
    assert done.returncode == 2
    assert "one separate run per node" in done.stderr
    assert "dlrig provision launch" in done.stderr


def test_help_ends_with_exit_codes(run_dlrig):
    done = run_dlrig("train", "--help")
    assert done.returncode == 0
    assert "Exit codes:" in done.stdout.split("Options:")[-1]


def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    folder = tmp_path / "runs"
    folder.mkdir()
    data = tmp_path / "notes.txt"
    data.write_text("not a program\n")
    no_interpreter = tmp_path / "job"
    no_interpreter.write_text("python train.py\n")  # no #! line: the kernel cannot run it
    no_interpreter.chmod(0o755)
    missing = str(tmp_path / "missing.py")
    return {
        "missing-script": ([missing], f"{missing}: no such file"),
        "missing-after-python": (["--", sys.executable, missing], f"{missing}: no such file"),
        "missing-under-gpus": (["--gpus", "2", missing], f"{missing}: no such file"),
        "a-directory": ([str(folder)], f"{folder}: is a directory"),
        "not-executable": (["--", str(data)], f"{data}: not executable"),
        "no-interpreter": (["--", str(no_interpreter)], f"{no_interpreter}: cannot be started"),
        "not-in-path": (["--", "no-such-program-xyz"], "no-such-program-xyz: command not found"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "missing-script",
        "missing-after-python",
        "missing-under-gpus",
        "a-directory",
        "not-executable",
        "no-interpreter",
        "not-in-path",
    ],
)
def test_a_command_that_cannot_start_is_one_line_naming_it(run_dlrig, tmp_path, case):
    args, words = _bad_inputs(tmp_path)[case]
    done = run_dlrig("train", *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert words in lines[0] and " — fix: " in lines[0], lines[0]


def _wait_for_ready(process: subprocess.Popen[str]) -> int:
    """The child's pid, once it says it is ready (a timer kills dlrig if it never does)."""
    assert process.stdout is not None
    timer = threading.Timer(TIMEOUT_S, process.kill)
    timer.start()
    try:
        for line in process.stdout:
            if line.startswith("ready "):
                return int(line.split()[1])
    finally:
        timer.cancel()
    raise AssertionError(f"the child never got ready: {process.communicate()[1][-2000:]}")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DLRIG_DEBUG"}
    env.update(extra)
    return env


def test_ctrl_c_at_the_terminal_reaches_the_command_once(tmp_path):
    """The terminal sends SIGINT to dlrig and its child (one foreground group): dlrig must not
    send a second, which would cut a checkpoint short."""
    out = tmp_path / "got.txt"
    terminal = Terminal(
        [sys.executable, "-m", "dlrig.cli.main", "train", SIGNAL_CHILD, str(out)], _env(), ROOT
    )
    terminal.wait_for_text("\nready ", start_of_line=True)
    terminal.type(b"\x03")
    assert terminal.wait() == 130, terminal.output.decode()[-2000:]
    assert out.read_text().split() == ["SIGINT"]


@pytest.mark.parametrize(
    ("signum", "child_code", "expected"),
    [
        (signal.SIGTERM, None, 143),  # the child's own 143
        (signal.SIGHUP, 1, 129),  # a child that exits 1 after it (torchrun): stopped by SIGHUP
    ],
    ids=["SIGTERM", "SIGHUP-then-exit-1"],
)
def test_a_signal_sent_to_dlrig_is_forwarded_once(tmp_path, signum, child_code, expected):
    out = tmp_path / "got.txt"
    extra = [] if child_code is None else ["--exit-code", str(child_code)]
    process = subprocess.Popen(
        [sys.executable, "-m", "dlrig.cli.main", "train", SIGNAL_CHILD, str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
    )
    _wait_for_ready(process)
    process.send_signal(signum)  # from kill(2): only dlrig got it
    _, stderr = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == expected, stderr[-2000:]
    assert out.read_text().split() == [signal.Signals(signum).name]


def test_kill_9_of_dlrig_stops_its_command_and_leaves_no_temporary_files(tmp_path):
    out = tmp_path / "got.txt"
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-m", "dlrig.cli.main", "train", SIGNAL_CHILD, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(TMPDIR=str(temporary)),
        cwd=ROOT,
    )
    child = _wait_for_ready(process)
    process.kill()
    process.wait(timeout=TIMEOUT_S)
    deadline = time.monotonic() + TIMEOUT_S
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(child), "the command outlived a killed dlrig train"
    assert out.read_text().split() == ["SIGTERM"]  # from the kernel (PR_SET_PDEATHSIG)
    assert list(temporary.iterdir()) == []
    process.communicate(timeout=TIMEOUT_S)

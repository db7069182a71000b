"""The live view's keys as a state machine, the tree order, and a signal sent to a real process
only once confirmed and only while the pid is still the process shown."""

from __future__ import annotations

import signal
import subprocess
import sys

import psutil
import pytest

from dlrig.cli.monitor_keys import split_keys
from dlrig.machine.host_processes import HostProcess, send_signal
from dlrig.machine.model import Gpu, GpuProcess
from dlrig.monitor.interactive import DOWN, UP, Send, ViewState
from dlrig.monitor.processes import ProcessOptions, Row, process_table
from dlrig.monitor.sample import GpuReading, Sample

PIDS = [Row(0, 5022, 10.0), Row(0, 5021, 11.0), Row(0, 2496, 12.0)]


def test_arrows_select_sort_cycles_and_tree_toggles():
    state = ViewState(ProcessOptions(), can_signal=True)
    state.press(DOWN[0], PIDS)
    assert state.selected == (0, 5022)  # the first press selects the first row
    state.press(DOWN[0], PIDS)
    state.press(DOWN[1], PIDS)  # the application-mode arrow some terminals send
    state.press(DOWN[0], PIDS)
    assert state.selected == (0, 2496)  # stops at the last row
    state.press(UP[0], PIDS)
    assert state.selected == (0, 5021)
    state.press("s", PIDS)
    assert state.options.sort == "gpu-memory" and "[sort: gpu-memory]" in state.status()
    state.press("t", PIDS)
    assert state.options.tree and "tree" in state.status()
    state.press("q", PIDS)
    assert state.quit


def test_a_signal_is_sent_only_after_y_and_never_to_a_replay():
    state = ViewState(ProcessOptions(), can_signal=True)
    state.press("T", PIDS)
    assert "select a process first" in state.status()
    state.press(DOWN[0], PIDS)
    assert state.press("K", PIDS) is None
    assert state.status().startswith("send SIGKILL to pid 5022?")
    assert state.press("n", PIDS) is None and state.status() == "not sent"
    state.press("T", PIDS)
    assert state.press("y", PIDS) == Send(5022, signal.SIGTERM, 10.0)  # with its start time
    replay = ViewState(ProcessOptions(), can_signal=False, selected=(0, 5022))
    assert replay.press("K", PIDS) is None and "replay's processes" in replay.status()
    # A pid NVML lists that this host cannot see (another PID namespace) is never signalled.
    foreign = ViewState(ProcessOptions(), can_signal=True, selected=(1, 77))
    assert foreign.press("K", [Row(1, 77, None)]) is None
    assert "not a process this host can see" in foreign.status()


def test_a_pid_on_two_gpus_does_not_trap_the_selection():
    # DDP ranks often hold a context on GPU 0 too: the same pid on two lines.
    rows = [Row(0, 10, 1.0), Row(0, 11, 1.0), Row(1, 10, 1.0), Row(1, 12, 1.0)]
    state = ViewState(ProcessOptions(), can_signal=True)
    for _ in range(4):
        state.press(DOWN[0], rows)
    assert state.selected == (1, 12)


def test_keys_typed_together_are_split():
    assert split_keys("\x1b[B\x1b[Bs") == ["\x1b[B", "\x1b[B", "s"]
    assert split_keys("\x1bOAq") == ["\x1bOA", "q"]


def test_the_tree_puts_ranks_under_their_launcher():
    launcher, rank0, rank1, other = 100, 101, 102, 200
    gpu = Gpu(
        index=0,
        name="NVIDIA H200",
        processes=tuple(
            GpuProcess(pid=pid, name="python", used_memory_bytes=gib << 30)
            for pid, gib in ((rank1, 30), (other, 20), (rank0, 40), (launcher, 1))
        ),
    )
    hosts = (
        HostProcess(launcher, parent_pid=1, command="torchrun train.py"),
        HostProcess(rank0, parent_pid=launcher, command="python train.py --rank 0"),
        HostProcess(rank1, parent_pid=launcher, command="python train.py --rank 1"),
        HostProcess(other, parent_pid=1, command="python serve.py"),
    )
    sample = Sample(1.0, 0.0, (GpuReading(0, "ok", gpu),), None, (), 1, hosts)
    lines, rows = process_table(sample, 160, ProcessOptions(tree=True))
    # Roots in the sort order (GPU memory), each rank under its launcher.
    assert [row.pid for row in rows] == [other, launcher, rank0, rank1]
    assert lines[3].rstrip().endswith("└ python train.py --rank 0")
    _, flat = process_table(sample, 160, ProcessOptions())
    assert [row.pid for row in flat] == [rank0, rank1, other, launcher]  # by GPU memory


@pytest.mark.slow
def test_send_signal_reaches_the_process_shown_and_not_a_reused_pid():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        started = psutil.Process(child.pid).create_time()
        assert "another process now" in send_signal(child.pid, signal.SIGTERM, started - 100)
        assert child.poll() is None  # a start time that does not match: nothing was sent
        assert send_signal(child.pid, signal.SIGTERM, started) == f"sent SIGTERM to pid {child.pid}"
        assert child.wait(timeout=60) == -signal.SIGTERM
        assert send_signal(child.pid, signal.SIGTERM, started) == f"pid {child.pid} has exited"
    finally:
        child.kill()
        child.wait()

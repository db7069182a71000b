"""The process view: what NVML, `nvidia-smi pmon` and the host say of each GPU process.

Per-process figures come from the recorded captures (nvidia-smi -q, the process table and
`pmon -c 5` under load); host figures from real processes this test starts."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
import time

import pytest

from dlrig.machine.host_processes import ProcessMeter
from dlrig.machine.model import Gpu, GpuProcess
from dlrig.machine.readers import nvsmi_capture, nvsmi_pmon
from dlrig.monitor.processes import ProcessOptions, elapsed, process_lines
from dlrig.monitor.sample import GpuReading, Sample
from dlrig.monitor.sampler import named_here
from tests.conftest import NVSMI

ENCODE = NVSMI / "rtx4080super-capture-idle-load.txt"  # two ffmpeg NVENC jobs under load
MIG = NVSMI / "h100-80gb-mig-4inst-capture-idle-load.txt"  # gpu_burn in GI 2 / CI 0
H200 = NVSMI / "h200-capture-idle-load.txt"


def _section(path, state: str, what: str) -> str:
    _, sections = nvsmi_capture.split_sections(path.read_text())
    return next(s.body for s in sections if s.state == state and s.what.startswith(what))


def _gpus(path, state: str) -> tuple[Gpu, ...]:
    _, sections = nvsmi_capture.split_sections(path.read_text())
    return nvsmi_capture.gpus_for_state(sections, state)


def test_pmon_keeps_each_processes_last_row():
    use = nvsmi_pmon.read(_section(ENCODE, "load", "pmon"))
    # The last of five rows: "0 5022 C 3 1 55 - - - ffmpeg", "0 2165 C+G - - - 0 ...".
    assert use[(0, 5022)] == (3.0, 55.0, None)
    assert use[(0, 2165)] == (None, None, 0.0)
    assert nvsmi_pmon.read(_section(H200, "load", "pmon"))[(0, 10309)].sm_percent == 99.0


def test_a_capture_gives_processes_their_mig_instance_and_engine_use():
    [mig] = _gpus(MIG, "load")
    assert {(p.pid, p.gpu_instance_id, p.compute_instance_id) for p in mig.processes or ()} == {
        (21180, 2, 0),
        (21181, 2, 0),
        (21198, 2, 0),
    }
    [encoder] = _gpus(ENCODE, "load")
    by_pid = {p.pid: p for p in encoder.processes or ()}
    assert (by_pid[5022].sm_percent, by_pid[5022].encoder_percent) == (3.0, 55.0)
    assert by_pid[5021].used_memory_bytes is not None


def _sample(gpus: tuple[Gpu, ...], processes=()) -> Sample:
    readings = tuple(GpuReading(g.index, "ok", g) for g in gpus)
    return Sample(time.time(), 0.0, readings, None, (), 1, processes)


def test_sort_and_filter_over_the_recorded_processes():
    sample = _sample(_gpus(ENCODE, "load"))
    by_sm = process_lines(sample, 120, ProcessOptions(sort="sm"))
    assert by_sm[0].split()[:5] == ["GPU", "PID", "GPU", "GiB", "SM%"]
    assert by_sm[1].split()[1] == "5022" and by_sm[2].split()[1] == "5021"  # 3 % before 2 %
    assert "55/-" in by_sm[1]  # NVENC 55 %, no decoder sample
    ffmpeg = process_lines(sample, 120, ProcessOptions(filter="FFMPEG"))
    assert len(ffmpeg) == 3 and all("ffmpeg" in line for line in ffmpeg[1:])
    assert process_lines(sample, 120, ProcessOptions(filter="nomatch")) == [
        "no GPU process matches --filter 'nomatch'"
    ]
    mig = process_lines(_sample(_gpus(MIG, "load")), 80)
    assert "GI/CI" in mig[0] and all(" 2/0 " in line for line in mig[1:])


@pytest.fixture
def busy_child():
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nend = time.time() + 60\nwhile time.time() < end: pass"]
    )
    yield child
    child.kill()
    child.wait()


@pytest.mark.slow
def test_the_host_side_of_a_real_process(busy_child):
    meter = ProcessMeter()
    [first] = meter.read([busy_child.pid, 2**22 + 12345])  # a pid that does not exist is left out
    assert first.cpu_percent is None  # no baseline yet
    time.sleep(0.5)
    [second] = meter.read([busy_child.pid])
    assert second.cpu_percent is not None and second.cpu_percent > 0  # a busy loop
    assert second.user == getpass.getuser()
    assert second.rss_bytes and second.rss_bytes > 1 << 20
    assert second.parent_pid == os.getpid()
    assert "while time.time()" in (second.command or "")
    assert abs((second.started_unix or 0) - time.time()) < 60


@pytest.mark.slow
def test_the_sampler_looks_up_only_processes_nvml_could_name_here(busy_child):
    gpu = Gpu(
        index=0,
        name="NVIDIA H200",
        processes=(
            GpuProcess(pid=busy_child.pid, name="python"),
            GpuProcess(pid=os.getpid(), name=None),  # another PID namespace's: not looked up
        ),
    )
    readings = (GpuReading(0, "ok", gpu),)
    assert named_here(readings) == {busy_child.pid}
    found = ProcessMeter().read(named_here(readings))
    lines = process_lines(_sample((gpu,), found), 160)
    assert "user" in lines[0] and "CPU%" in lines[0] and "RSS GiB" in lines[0]
    [row] = [line for line in lines[1:] if f" {busy_child.pid} " in line]
    assert getpass.getuser() in row.split()


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (5, "5s"), (754, "12:34"), (11554, "3:12:34"), (2 * 86400 + 3 * 3600, "2d03h")],
)
def test_run_time_as_ps_writes_it(seconds, text):
    assert elapsed(seconds) == text

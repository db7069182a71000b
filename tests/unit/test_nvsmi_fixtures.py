"""Every recorded nvidia-smi fixture loads with `--from`, and the GPU facts match the file.

Expected values are transcribed from the fixture files themselves (see the comment on each),
not produced by the parser.
"""

from __future__ import annotations

import pytest

from dlrig import doctor
from dlrig.machine import readers
from dlrig.machine.readers import nvsmi_capture
from tests.conftest import NVSMI

MIB = 1024**2

# file, state, name, memory.total MiB, driver, CUDA, (gen cur, gen max, width cur, width max), MIG
EXPECTED = [
    # <product_name>, <fb_memory_usage><total>, <driver_version>, <cuda_version>, <pci_gpu_link_info>
    (
        "a100-sxm4-80gb-mig-4inst-q-x.xml",
        None,
        "NVIDIA A100-SXM4-80GB",
        81920,
        "535.54.03",
        "12.2",
        (4, 4, 16, 16),
        True,
    ),
    (
        "rtx3090-q-x.xml",
        None,
        "NVIDIA GeForce RTX 3090",
        24576,
        "525.147.05",
        "12.0",
        (1, 4, 16, 16),
        None,
    ),
    (
        "rtx4000-sff-ada-4procs-q-x-v13.xml",
        None,
        "NVIDIA RTX 4000 SFF Ada Generation",
        20475,
        "595.84",
        "13.2",
        (1, 4, 16, 16),
        None,
    ),
    ("tesla-t4-2procs-q-x.xml", None, "Tesla T4", 15360, "515.105.01", "11.7", (3, 3, 8, 16), None),
    # captures: the query-gpu CSV row and the `nvidia-smi --version` block of each state
    (
        "h100-80gb-mig-4inst-capture-idle-load.txt",
        "load",
        "NVIDIA H100 80GB HBM3",
        81559,
        "590.48.01",
        "13.1",
        (5, 5, 16, 16),
        True,
    ),
    (
        "h200-capture-idle-load.txt",
        "load",
        "NVIDIA H200",
        143771,
        "590.48.01",
        "13.1",
        (5, 5, 16, 16),
        False,
    ),
    (
        "rtx4080super-capture-idle-load.txt",
        "idle",
        "NVIDIA GeForce RTX 4080 SUPER",
        16376,
        "595.71.05",
        "13.2",
        (1, 4, 16, 16),
        None,
    ),
    (
        "rtx4080super-capture-idle-load.txt",
        "load",
        "NVIDIA GeForce RTX 4080 SUPER",
        16376,
        "595.71.05",
        "13.2",
        (4, 4, 16, 16),
        None,
    ),
]


def _load(file: str, state: str | None):
    path = NVSMI / file
    if state is None:
        return readers.load(path)
    return nvsmi_capture.read(path.read_text(), str(path), state=state)


@pytest.mark.parametrize(
    ("file", "state", "name", "mib", "driver", "cuda", "pcie", "mig"), EXPECTED
)
def test_gpu_facts_match_the_file(file, state, name, mib, driver, cuda, pcie, mig):
    machine = _load(file, state)
    assert machine.gpus, file
    gpu = machine.gpus[0]
    assert gpu.name == name
    assert gpu.memory_total_bytes == mib * MIB
    assert machine.driver.version == driver
    assert machine.driver.cuda_version == cuda
    assert (
        gpu.pcie.gen_current,
        gpu.pcie.gen_max,
        gpu.pcie.width_current,
        gpu.pcie.width_max,
    ) == pcie
    assert gpu.mig_mode_enabled is mig
    assert gpu.catalogue_id is not None, f"{name} should resolve in the GPU catalogue"


def test_every_fixture_loads():
    files = [p for p in NVSMI.iterdir() if p.suffix in {".xml", ".txt", ".log"}]
    # 8 recordings + 7 plain tables (test_readers_formats.py) + one -d UTILIZATION excerpt
    assert len(files) == 16
    for path in files:
        machine = readers.load(path)
        assert machine.origin.path == str(path)
        report = doctor.run(machine=machine)
        assert len(report.checks) >= 35


def test_a100_mig_instances_and_identity():
    machine = readers.load(NVSMI / "a100-sxm4-80gb-mig-4inst-q-x.xml")
    gpu = machine.gpus[0]
    # four <mig_device> blocks of 19968 MiB and 14 SMs each
    assert [d.memory_total_bytes for d in gpu.mig_devices] == [19968 * MIB] * 4
    assert {d.sm_count for d in gpu.mig_devices} == {14}
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.pci_bus_id == "00000000:01:00.0"
    assert gpu.persistence_mode is False
    # the document says 4 GPUs are attached but contains one <gpu>: recorded, not hidden
    assert any("4 GPUs are attached but describes 1" in i.reason for i in machine.probe_issues)


def test_t4_processes_and_link():
    machine = readers.load(NVSMI / "tesla-t4-2procs-q-x.xml")
    gpu = machine.gpus[0]
    assert [(p.pid, p.kind, p.used_memory_bytes) for p in gpu.processes] == [
        (675, "G", 22 * MIB),
        (5762, "C", 1005 * MIB),
    ]
    assert gpu.ecc_mode_enabled is True
    assert gpu.retired_pages.pending is False


def test_rtx3090_power_cap_and_idle_reason():
    gpu = readers.load(NVSMI / "rtx3090-q-x.xml").gpus[0]
    # <power_limit>200.00 W</power_limit>, <default_power_limit>350.00 W</default_power_limit>
    assert gpu.power_limit_watts == 200.0
    assert gpu.power_default_limit_watts == 350.0
    assert gpu.clocks_event_reasons == ("gpu_idle",)
    assert gpu.ecc_errors.volatile_uncorrected is None  # "N/A" on GeForce is data, not zero


def test_rtx4000_v13_schema():
    gpu = readers.load(NVSMI / "rtx4000-sff-ada-4procs-q-x-v13.xml").gpus[0]
    # four <process_info> blocks: pids 1842 G, 3190 G, 4937 C, 34626 C+G
    assert [(p.pid, p.kind, p.used_memory_bytes // MIB) for p in gpu.processes] == [
        (1842, "G", 410),
        (3190, "G", 451),
        (4937, "C", 160),
        (34626, "C+G", 183),
    ]
    assert gpu.remapped_rows.pending is False
    assert gpu.remapped_rows.failure is False


def test_h100_capture_mig_and_processes():
    machine = _load("h100-80gb-mig-4inst-capture-idle-load.txt", "load")
    gpu = machine.gpus[0]
    # -q "MIG Device" blocks: Shared FB Memory Usage Total 40448 / 20096 / 9984 / 9984 MiB
    assert [d.memory_total_bytes // MIB for d in gpu.mig_devices] == [40448, 20096, 9984, 9984]
    assert gpu.utilization_gpu_percent is None  # [N/A] under MIG
    assert sorted(p.pid for p in gpu.processes) == [21180, 21181, 21198]
    assert gpu.compute_capability == "9.0"
    assert machine.os.kernel_release == "5.15.0-185-generic"


def test_h200_idle_and_load_states():
    idle = _load("h200-capture-idle-load.txt", "idle").gpus[0]
    load = _load("h200-capture-idle-load.txt", "load").gpus[0]
    assert idle.processes == ()
    assert load.utilization_gpu_percent == 100.0
    assert [p.used_memory_bytes // MIB for p in load.processes] == [2566, 1542, 28234]
    assert load.clocks_event_reasons == ()  # clocks_event_reasons.active 0x0 under load
    assert "gpu_idle" in idle.clocks_event_reasons


def test_capture_rejects_unknown_state():
    path = NVSMI / "h200-capture-idle-load.txt"
    with pytest.raises(ValueError, match="no state 'busy'"):
        nvsmi_capture.read(path.read_text(), str(path), state="busy")


def test_dmesg_xid119_events():
    machine = readers.load(NVSMI / "dmesg-xid119-gsp-rpc-timeout.log")
    events = machine.kernel_log.xid_events
    assert [e.code for e in events] == [119] * 5
    assert {e.pci_bus_id for e in events} == {"0000:9b:00"}
    assert [e.process_name for e in events] == [
        "nvidia-smi",
        "nvidia-smi",
        "nvidia-smi",
        "cache_mgr_main",
        "gpud",
    ]
    assert events[0].pid == 2024380
    assert events[0].timestamp == "Sun Feb 23 16:24:18 2025"

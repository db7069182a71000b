"""AMD recordings: `rocm-smi --json` from ROCm 4.3 to 6.1 (tests/fixtures/amd, SOURCES.md).

Expected values are the recordings' own text, quoted; each file is read through the same
entry points a user has (`doctor --from`, `monitor --replay`).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dlrig.errors import InputError
from dlrig.machine import readers
from tests.conftest import AMD

# rocm-smi --json recordings (the amd-smi example is read by its own test)
CAPTURES = sorted(p for p in AMD.glob("*.json") if not p.name.startswith("amd-smi"))
GIB = 2**30


def _number(raw: str) -> float | None:
    """A quoted reading, None where rocm-smi printed none ("N/A (Secondary die)")."""
    try:
        return float(raw)
    except ValueError:
        return None


def test_every_capture_is_read_with_the_fields_a_user_reads() -> None:
    assert len(CAPTURES) >= 8
    for path in CAPTURES:
        document = json.loads(path.read_text())
        cards = [key for key in document if key.startswith("card")]
        machine = readers.load(path)
        assert machine.gpus is not None and len(machine.gpus) == len(cards), path.name
        for gpu, key in zip(machine.gpus, cards, strict=True):
            raw = document[key]
            assert gpu.vendor == "amd"
            assert gpu.memory_total_bytes == int(raw["VRAM Total Memory (B)"]), path.name
            assert gpu.memory_used_bytes == int(raw["VRAM Total Used Memory (B)"]), path.name
            assert gpu.temperature_c == _number(raw["Temperature (Sensor edge) (C)"]), path.name
            assert gpu.power_draw_watts == _number(raw["Average Graphics Package Power (W)"])
            assert gpu.power_limit_watts == _number(raw["Max Graphics Package Power (W)"])
            assert gpu.utilization_gpu_percent == _number(raw["GPU use (%)"]), path.name
            assert gpu.pci_bus_id == raw["PCI Bus"]
        assert machine.rocm is not None
        assert machine.rocm.amdgpu_driver_version == document["system"]["Driver version"]


def test_mi100_on_rocm_602_reads_as_quoted() -> None:
    machine = readers.load(AMD / "mi100_rocm602.json")
    assert machine.gpus is not None
    first = machine.gpus[0]
    # "Card series": "Arcturus GL-XL [Instinct MI100]"
    assert first.name == "AMD Instinct MI100"
    # "pcie clock level": "0 (16.0GT/s x16)"
    assert (first.pcie.gen_current, first.pcie.width_current) == (4, 16)
    # "sclk clock speed:": "(300Mhz)", "mclk clock speed:": "(1200Mhz)"
    assert (first.sm_clock_mhz, first.memory_clock_mhz) == (300, 1200)
    assert first.uuid == "0x79ccd55167a2124a"
    assert first.serial is None  # "Serial Number": "N/A"
    assert machine.rocm is not None and machine.rocm.amdgpu_driver_version == "6.3.6"
    # "(Topology) Link type between DRM devices 0 and 1": "PCIE"
    assert machine.topology is not None
    assert machine.topology.matrix[0][:2] == ("X", "PCIE")


def test_rocm_61_names_the_gfx_target_and_memory_activity() -> None:
    machine = readers.load(AMD / "rx6700xt_rocm612.json")
    assert machine.gpus is not None
    [gpu] = machine.gpus
    assert gpu.gfx_target == "gfx1031"  # "GFX Version": "gfx1031"
    assert gpu.name == "AMD Radeon RX 6700/6700 XT / 6800M"
    # 6.1 splits the old "GPU memory use (%)": the busy percent is the read/write activity.
    raw = json.loads((AMD / "rx6700xt_rocm612.json").read_text())["card0"]
    assert gpu.utilization_memory_percent == float(raw["GPU Memory Read/Write Activity (%)"])


def test_rocm_43_prints_only_ids_and_the_name_says_so() -> None:
    [gpu] = readers.load(AMD / "rx6700xt_rocm430.json").gpus or ()
    # "Card series": "0x1002" (a vendor id, not a name); "GPU ID": "0x73df"
    assert gpu.name == "AMD GPU 0x73df"


def test_a_truncated_capture_is_refused_in_one_line(tmp_path) -> None:
    text = (AMD / "mi100_rocm602.json").read_text()
    cut = tmp_path / "cut.json"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(InputError) as caught:
        readers.load(cut)
    assert "unreadable rocm-smi JSON" in str(caught.value)
    assert str(cut) in str(caught.value)


def test_doctor_from_a_capture_speaks_of_amd_not_nvidia() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "dlrig", "doctor", "--from", str(AMD / "mi100_rocm571.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    assert "AMD Instinct MI100" in done.stdout
    assert "NVIDIA GPU" not in done.stdout


def test_monitor_replays_a_capture_as_recorded() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlrig",
            "monitor",
            "--replay",
            str(AMD / "mi100_rocm602.json"),
            "--once",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    text = json.dumps(document)
    # The first card: 53.0 °C edge, 36.0 W, 34342961152 B of VRAM.
    assert "53.0" in text and "36.0" in text
    assert str(34342961152) in text or f"{34342961152 / GIB:.1f}" in text


def test_amd_smi_metric_json_reads_as_quoted() -> None:
    # ROCm/amdsmi CHANGELOG, 6.1.0: "socket_power": {"value": 10, "unit": "W"} of "gpu": 0
    machine = readers.load(AMD / "amd-smi-metric-p-rocm6.1.0-changelog.json")
    [gpu] = machine.gpus or ()
    assert (gpu.index, gpu.vendor, gpu.power_draw_watts) == (0, "amd", 10.0)
    assert gpu.utilization_gpu_percent is None  # -p asks for power only


def test_amd_smi_static_json_reads_the_board_as_recorded() -> None:
    # ROCm/device-metrics-exporter's recorded `amd-smi static --json` of an MI210
    path = AMD / "amd-smi-static-mi210-device-metrics-exporter.json"
    [raw] = json.loads(path.read_text())["gpu_data"]
    [gpu] = readers.load(path).gpus or ()
    assert (gpu.name, gpu.gfx_target) == (raw["asic"]["market_name"], "gfx90a")
    assert gpu.memory_total_bytes == raw["vram"]["size"]["value"] * 2**20  # 65520 MB (MiB)
    assert gpu.power_limit_watts == raw["limit"]["socket_power"]["value"]  # 300 W
    assert (gpu.pcie.gen_max, gpu.pcie.width_max) == (4, raw["bus"]["max_pcie_width"])  # 16 GT/s
    assert gpu.pcie.gen_current is None  # `static` holds the maximum only
    assert gpu.ecc_mode_enabled is True  # ras.ecc_block_state: UMC ENABLED
    assert gpu.ecc_errors.volatile_uncorrected is None  # counts are `metric`'s, not here
    # an in-kernel amdgpu reports the kernel's banner, not a driver release: not taken as one
    machine = readers.load(path)
    assert machine.rocm is not None and machine.rocm.amdgpu_driver_version is None
    assert raw["driver"]["version"].startswith("Linuxversion6.14")


def test_an_apus_amd_smi_static_and_list_read_as_recorded() -> None:
    # redhat-et/GKM's test data "captured from amd-smi on Strix Halo" (Apache-2.0): an APU has
    # no PCIe link to report ("N/A") and states its power limits as 0 W.
    static = AMD / "amd-smi-static-strixhalo-gfx1151-gkm.json"
    [raw] = json.loads(static.read_text())
    [gpu] = readers.load(static).gpus or ()
    assert (gpu.name, gpu.gfx_target) == (raw["asic"]["market_name"], "gfx1151")
    assert gpu.memory_total_bytes == 32768 * 2**20
    assert gpu.pci_bus_id == raw["bus"]["bdf"] == "0000:c4:00.0"
    assert raw["limit"]["socket_power"]["value"] == 0 and gpu.power_limit_watts is None
    assert (gpu.pcie.gen_max, gpu.pcie.width_max) == (None, None)
    # `list` holds the bus address and the UUID, which bench matches torch's device by
    listed = AMD / "amd-smi-list-strixhalo-gfx1151-gkm.json"
    [entry] = json.loads(listed.read_text())
    [gpu] = readers.load(listed).gpus or ()
    assert (gpu.pci_bus_id, gpu.uuid) == (entry["bdf"], entry["uuid"])


def test_amd_smi_process_json_reads_each_process_and_its_vram() -> None:
    # ROCm/ROCm#5706: `amd-smi process --json`, two R9700, four python processes on each
    path = AMD / "amd-smi-process-r9700-rocm720-issue5706.json"
    document = json.loads(path.read_text())
    gpus = readers.load(path).gpus or ()
    assert [g.index for g in gpus] == [g["gpu"] for g in document] == [0, 1]
    for gpu, raw in zip(gpus, document, strict=True):
        listed = [p["process_info"] for p in raw["process_list"]]
        assert [(p.pid, p.name) for p in gpu.processes or ()] == [
            (p["pid"], p["name"]) for p in listed
        ]
        assert [p.used_memory_bytes for p in gpu.processes or ()] == [
            p["memory_usage"]["vram_mem"]["value"]
            for p in listed  # unit "B"
        ]


def test_another_vendors_capture_is_refused_where_it_cannot_apply() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlrig",
            "monitor",
            "serve",
            "--replay",
            str(AMD / "mi100_rocm602.json"),
            "--dcgm-names",
            "--port",
            "0",
            "--duration",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = [x for x in done.stderr.splitlines() if x.strip()][:1]
    assert "dcgm-exporter" in line and "AMD" in line

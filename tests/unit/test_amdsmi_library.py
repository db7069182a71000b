"""AMD's library (the `amdsmi` binding) as the live probe reads it: the answers recorded by
ROCm/amdsmi's own integration test on a Navi 21, and the real binding on a machine without
libamd_smi.so."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path
from typing import Any

import pytest

from dlrig.machine import amdsmi_library
from tests.conftest import AMD

RECORDING = AMD / "amdsmi-python-integration-test-navi21.txt"


def _printed(text: str, call: str, key: str) -> str:
    """The value the test printed for `call`'s dict key, e.g. asic_info['market_name']."""
    found = re.search(rf"{call}\['{key}'\] is: (.+)", text)
    assert found, (call, key)
    return found.group(1).strip()


def _answer(value: str) -> Any:
    """A printed value as the binding returns it: ints, "N/A", text; "9 %" and "16000 MT/s"
    are the test's formatting of an int."""
    number = re.fullmatch(r"(\d+)(?: %| MT/s)?", value)
    return int(number.group(1)) if number else value


def _recorded_calls() -> dict[str, Any]:
    text = RECORDING.read_text(encoding="utf-8")

    def section(call: str, keys: tuple[str, ...]) -> dict[str, Any]:
        return {key: _answer(_printed(text, call, key)) for key in keys}

    temperature = {
        sensor: int(m.group(1))
        for sensor in ("EDGE", "HOTSPOT", "VRAM")
        if (m := re.search(rf"Current temperature for {sensor} is: (\d+)", text))
    }
    driver = re.search(
        r"Driver info:\s+\{'driver_name': '(\w+)', 'driver_version': '([\d.]+)', "
        r"'driver_date': '([^']+)'",
        text,
    )
    ecc = {
        f"{kind}_count": int(m.group(1))
        for kind in ("uncorrectable", "correctable", "deferred")
        if (m := re.search(rf"Number of {kind} errors: (\d+)", text))
    }
    assert driver and len(temperature) == 3 and len(ecc) == 3
    return {
        "amdsmi_get_gpu_asic_info": section(
            "asic_info", ("market_name", "target_graphics_version", "device_id")
        ),
        "amdsmi_get_gpu_device_bdf": re.search(r"bdf: (\S+)", text).group(1),  # type: ignore[union-attr]
        "amdsmi_get_gpu_device_uuid": re.search(r"uuid is: (\S+)", text).group(1),  # type: ignore[union-attr]
        "amdsmi_get_gpu_activity": section(
            "engine_usage", ("gfx_activity", "umc_activity", "mm_activity")
        ),
        "amdsmi_get_power_info": section(
            "power_info", ("current_socket_power", "average_socket_power", "power_limit")
        ),
        "amdsmi_get_pcie_info": {
            "pcie_metric": {
                k: _answer(_printed(text, r"pcie_info\['pcie_metric'\]", k))
                for k in ("pcie_width", "pcie_speed", "pcie_replay_count")
            },
            "pcie_static": {
                k: _answer(_printed(text, r"pcie_info\['pcie_static'\]", k))
                for k in ("max_pcie_width", "max_pcie_speed")
            },
        },
        "amdsmi_get_gpu_total_ecc_count": ecc,
        "amdsmi_get_gpu_driver_info": {
            "driver_name": driver.group(1),
            "driver_version": driver.group(2),
            "driver_date": driver.group(3),
        },
        "temperature_edge": temperature["EDGE"],
        "temperature_hotspot": temperature["HOTSPOT"],
        "temperature_vram": temperature["VRAM"],
        "vram_used": int(re.search(r"memory_usage for VRAM is: (\d+)", text).group(1)),  # type: ignore[union-attr]
    }


def test_the_recorded_navi21_answers_read_as_a_gpu() -> None:
    calls = _recorded_calls()
    gpu = amdsmi_library.gpu_from_calls(0, calls)
    assert (gpu.name, gpu.gfx_target, gpu.vendor) == ("NAVI21", "gfx1030", "amd")
    assert (gpu.pci_bus_id, gpu.uuid) == ("0000:43:00.0", "f8ff73bf-0000-1000-80ff-eb47a027de4d")
    assert (gpu.utilization_gpu_percent, gpu.utilization_memory_percent) == (9, 0)
    # current_socket_power is "N/A" on RDNA2: the average is the reading; the limit is in µW
    assert (gpu.power_draw_watts, gpu.power_limit_watts) == (39, 272)
    assert (gpu.temperature_edge_c, gpu.temperature_junction_c, gpu.memory_temperature_c) == (
        31,
        35,
        32,
    )
    assert gpu.temperature_c == 31
    # 16000 MT/s is PCIe 4.0; x16 of x16; replay counters "N/A"
    assert (gpu.pcie.gen_current, gpu.pcie.gen_max, gpu.pcie.width_current, gpu.pcie.width_max) == (
        4,
        4,
        16,
        16,
    )
    assert gpu.pcie_replay_errors is None
    assert (gpu.ecc_errors.volatile_corrected, gpu.ecc_errors.volatile_uncorrected) == (0, 0)
    # the total was not recorded, so the used bytes are not claimed without it
    assert gpu.memory_total_bytes is None and gpu.memory_used_bytes is None
    # 'driver_version': '6.9.2' with the upstream in-kernel driver's date 2015/01/01: the kernel's
    # version, not an amdgpu release, so not taken as one
    assert calls["amdsmi_get_gpu_driver_info"]["driver_version"] == "6.9.2"
    assert amdsmi_library.driver_version(calls) is None


def test_unsupported_answers_are_absent_not_zero() -> None:
    gpu = amdsmi_library.gpu_from_calls(3, {"amdsmi_get_gpu_activity": None})
    assert gpu.name == "AMD GPU 3" and gpu.utilization_gpu_percent is None
    assert gpu.power_limit_watts is None and gpu.pcie.gen_current is None
    # an in-kernel driver reports the kernel's version, not an amdgpu release
    kernel = {"amdsmi_get_gpu_driver_info": {"driver_version": "6.17.1-300.fc43.x86_64"}}
    assert amdsmi_library.driver_version(kernel) is None


def test_the_real_binding_without_its_library_says_so_and_prints_nothing(capfd) -> None:
    importlib.metadata.version("amdsmi")  # installed by the dev extra: its absence fails here
    if Path("/opt/rocm/lib/libamd_smi.so").exists():  # a ROCm machine: the binding loads
        assert amdsmi_library.load() is not None
        return
    with pytest.raises(amdsmi_library.AmdSmiUnavailable, match=re.escape("libamd_smi.so")):
        amdsmi_library.load()
    printed = capfd.readouterr()
    assert printed.out == "" and printed.err == ""


def test_quiet_keeps_c_printf_out_of_stdout(capfd) -> None:
    """What the C library prints with printf while a call runs goes nowhere; stdout works after."""
    import ctypes

    libc = ctypes.CDLL(None)
    with amdsmi_library.quiet():
        libc.printf(b"from C while quiet\n")
    libc.printf(b"from C after\n")
    libc.fflush(None)
    out = capfd.readouterr().out
    assert "from C while quiet" not in out and "from C after" in out


def test_monitors_live_source_falls_back_past_the_binding_and_says_why() -> None:
    """On this machine (no NVIDIA driver, the amdsmi binding without libamd_smi.so, no
    nvidia-smi) the live source is none, and its note names each reason in order."""
    from dlrig.machine.gpu_sources import open_live_source

    source = open_live_source()
    try:
        if source.info.kind != "none":  # a machine with GPUs: one of the live sources read them
            assert source.info.kind in ("nvml", "amdsmi", "nvidia-smi")
            return
        assert source.info.kind == "none"
        note = source.info.note or ""
        assert note.index("NVML") < note.index("libamd_smi.so") < note.index("nvidia-smi")
    finally:
        source.close()

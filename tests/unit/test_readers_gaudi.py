"""Intel Gaudi recordings: hl-smi tables of releases 1.15 to 1.19 and an `hl-smi -Q` CSV
(tests/fixtures/gaudi, SOURCES.md). Expected values are the recordings' own text, quoted."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dlrig.errors import InputError
from dlrig.machine import readers
from tests.conftest import GAUDI

MIB = 2**20


def test_the_eight_gaudi2_table_reads_as_quoted() -> None:
    machine = readers.load(GAUDI / "hl-smi-gaudi2x8-1.19.1.txt")
    gpus = machine.gpus or ()
    assert len(gpus) == 8
    assert {g.vendor for g in gpus} == {"intel-gaudi"}
    # "|   3  HL-225              N/A  | 0000:b4:00.0     N/A |                   0  |"
    # "| N/A   22C   N/A  92W /  600W  | 96565MiB /  98304MiB |     0%           98% |"
    third = gpus[3]
    assert third.name == "Intel Gaudi 2 (HL-225)"
    assert third.catalogue_id == "gaudi2"
    assert third.pci_bus_id == "0000:b4:00.0"
    assert (third.temperature_c, third.power_draw_watts, third.power_limit_watts) == (22, 92, 600)
    assert (third.memory_used_bytes, third.memory_total_bytes) == (96565 * MIB, 98304 * MIB)
    assert third.utilization_gpu_percent == 0
    # "|   7       107684     C   ray::_RayTrainW                         16770MiB"
    [process] = gpus[7].processes or ()
    assert (process.pid, process.name, process.used_memory_bytes) == (
        107684,
        "ray::_RayTrainW",
        16770 * MIB,
    )
    assert machine.gaudi is not None
    assert machine.gaudi.driver_version == "1.19.1-6f47ddd"
    assert machine.gaudi.tool == "hl-1.20.0-fw-58.1.1.1"


@pytest.mark.parametrize(
    ("name", "model", "watts", "used_mib", "total_mib"),
    [
        ("hl-smi-gaudi2-1.15.1.txt", "HL-225", None, None, None),
        # "| N/A   43C   N/A   264W / 900W |    672MiB / 131072MiB |     0%           N/A|"
        ("hl-smi-gaudi3-1.18.0-cut.txt", "HL-325", 264, 672, 131072),
    ],
)
def test_every_table_is_read(name, model, watts, used_mib, total_mib) -> None:
    gpus = readers.load(GAUDI / name).gpus or ()
    assert gpus and all(model in g.name for g in gpus)
    if watts is not None:
        assert gpus[0].power_draw_watts == watts
        assert gpus[0].memory_used_bytes == used_mib * MIB
        assert gpus[0].memory_total_bytes == total_mib * MIB


def test_the_query_csv_reads_as_quoted() -> None:
    machine = readers.load(GAUDI / "hl-smi-q-noheader-gaudi3x2-1.22.1.csv")
    gpus = machine.gpus or ()
    # "1, 01P4-HL3090A0-18-U4V298-03-04-04, HL-325L, 1.22.1-97ec1a4, 131072 MiB, 672 MiB,
    #  130400 MiB, 230 W, 850 W, 39 C, 0 %"
    second = gpus[1]
    assert second.uuid == "01P4-HL3090A0-18-U4V298-03-04-04"
    assert second.name == "Intel Gaudi 3 (HL-325L)"
    assert (second.power_draw_watts, second.power_limit_watts, second.temperature_c) == (
        230,
        850,
        39,
    )
    assert second.memory_used_bytes == 672 * MIB
    assert machine.gaudi is not None and machine.gaudi.driver_version == "1.22.1-97ec1a4"


def test_a_table_cut_inside_a_device_is_refused(tmp_path) -> None:
    lines = (GAUDI / "hl-smi-gaudi2x8-1.19.1.txt").read_text().splitlines()
    cut = tmp_path / "cut.txt"
    cut.write_text("\n".join(lines[:8]) + "\n")  # the first device row without its second row
    with pytest.raises(InputError) as caught:
        readers.load(cut)
    assert "unreadable hl-smi table" in str(caught.value)


def test_doctor_reports_the_release_pairing_and_monitor_replays() -> None:
    capture = str(GAUDI / "hl-smi-gaudi2x8-1.19.1.txt")
    doctor = subprocess.run(
        [sys.executable, "-m", "dlrig", "doctor", "--from", capture, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert doctor.returncode in (0, 1), doctor.stderr
    results = {r["id"]: r for r in json.loads(doctor.stdout)["checks"]}
    assert "1.19.1" in results["gpu.gaudi_release"]["title"]
    assert "1.20.0" in results["gpu.gaudi_release"]["title"]
    monitor = subprocess.run(
        [sys.executable, "-m", "dlrig", "monitor", "--replay", capture, "--once", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert monitor.returncode == 0, monitor.stderr
    sample = json.loads(monitor.stdout)["sample"]["gpus"]
    assert [g["gpu"]["power_draw_watts"] for g in sample] == [96, 78, 81, 92, 83, 80, 86, 100]

"""Edges of the AMD, Gaudi, TensorFlow and JAX support found in review: specifier markers and
padding, rocm-smi's card numbers, cut hl-smi files, NVIDIA machines with ROCm installed,
and environments asked for the wrong vendor."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dlrig import doctor
from dlrig.errors import InputError
from dlrig.knowledge import framework_pins
from dlrig.machine import readers
from dlrig.machine.model import Frameworks, Gpu, Rocm, TorchInfo
from dlrig.machine.readers.merge import _same_model
from tests.conftest import AMD, GAUDI, NVSMI


def test_specifiers_ignore_markers_and_pad_releases() -> None:
    # jax-cuda12-plugin's METADATA: nvidia-cudnn-cu12 '<10.0,>=9.8 ; sys_platform == "linux"'
    assert not framework_pins.satisfies("9.1.0.70", '<10.0,>=9.8 ; sys_platform == "linux"')
    assert framework_pins.satisfies("9.8.0.87", '<10.0,>=9.8 ; sys_platform == "linux"')
    assert framework_pins.satisfies("9.3.0", "<=9.3")
    assert not framework_pins.satisfies("9.3.0", ">9.3")
    assert not framework_pins.satisfies("9.0.0", "!=9.0")


def _result(machine, check_id):
    return next(r for r in doctor.run(machine=machine).checks if r.id == check_id)


def test_rocm_smi_keeps_card_numbers_for_gpus_and_links(tmp_path) -> None:
    document = json.loads((AMD / "mi100_rocm602.json").read_text())
    subset = {k: v for k, v in document.items() if k in ("card2", "card3", "system")}
    path = tmp_path / "rocm-smi-d-2-3.json"
    path.write_text(json.dumps(subset))
    machine = readers.load(path)
    assert [g.index for g in machine.gpus or ()] == [2, 3]
    assert machine.topology is not None
    assert machine.topology.labels == ("GPU2", "GPU3")
    # "(Topology) Link type between DRM devices 2 and 3": "PCIE"
    assert machine.topology.matrix[0][1] == "PCIE"


def test_a_hl_smi_table_cut_after_a_device_row_is_refused(tmp_path) -> None:
    lines = (GAUDI / "hl-smi-gaudi2x8-1.19.1.txt").read_text().splitlines()
    cut = tmp_path / "cut.txt"
    cut.write_text("\n".join(lines[:12]) + "\n")  # device 1's first row is the last line
    with pytest.raises(InputError):
        readers.load(cut)


def test_hl_smi_csv_keeps_index_zero(tmp_path) -> None:
    lines = (GAUDI / "hl-smi-q-noheader-gaudi3x2-1.22.1.csv").read_text().splitlines()
    swapped = tmp_path / "swapped.csv"
    swapped.write_text("\n".join(reversed(lines)) + "\n")
    assert [g.index for g in readers.load(swapped).gpus or ()] == [1, 0]


def test_an_nvidia_machine_with_rocm_installed_is_not_judged_for_kfd() -> None:
    a100 = readers.load(NVSMI / "a100-sxm4-80gb-mig-4inst-q-x.xml")
    machine = dataclasses.replace(a100, rocm=Rocm(version="6.1.2", kfd_present=False))
    assert _result(machine, "rocm.device_access").status == "skip"


def test_a_git_hash_is_not_a_rocm_version() -> None:
    card = readers.load(AMD / "mi100_rocm602.json")
    torch = TorchInfo(version="1.7.0a0+9ddd3df", build="rocm", hip_version="3.7.20315")
    machine = dataclasses.replace(
        card, frameworks=Frameworks(torch=torch), rocm=Rocm(version="3.7.0")
    )
    assert _result(machine, "rocm.stack_versions").status == "ok"


def test_an_amd_machine_is_not_called_cpu_only() -> None:
    paste = readers.load(AMD.parent.parent / "corpus/collect_env/none-rocm-mi210-torch250dev.txt")
    result = _result(paste, "driver.loaded")
    assert result.status == "skip" and "CPU" not in result.title


def test_one_amd_card_named_two_ways_is_one_card() -> None:
    [recorded] = readers.load(AMD / "rx6700xt_rocm612.json").gpus or ()
    pasted = Gpu(index=0, name="AMD Radeon RX 6700 XT", vendor="amd", gfx_target="gfx1031")
    assert _same_model(recorded, pasted)
    other = Gpu(index=0, name="AMD Radeon RX 7900 XTX", vendor="amd", gfx_target="gfx1100")
    assert not _same_model(recorded, other)


def test_environments_for_the_wrong_vendor_are_refused(run_dlrig, tmp_path) -> None:
    nvidia = run_dlrig(
        "provision",
        "env",
        "--gpu",
        "a100-sxm4-80gb",
        "--cuda-variant",
        "rocm6.2",
        "--out",
        str(tmp_path / "a"),
    )
    assert nvidia.returncode == 2 and "ROCm wheel for an NVIDIA GPU" in nvidia.stderr
    amd = run_dlrig(
        "provision",
        "env",
        "--machine",
        str(AMD / "mi100_rocm602.json"),
        "--python",
        "3.11",
        "--out",
        str(tmp_path / "b"),
    )
    assert amd.returncode == 0, amd.stderr
    assert (
        "download.pytorch.org/whl/rocm" in (tmp_path / "b" / "requirements-torch.txt").read_text()
    )
    gaudi = run_dlrig(
        "provision",
        "env",
        "--machine",
        str(GAUDI / "hl-smi-gaudi2-1.15.1.txt"),
        "--out",
        str(tmp_path / "c"),
    )
    assert gaudi.returncode == 2 and "Gaudi" in gaudi.stderr

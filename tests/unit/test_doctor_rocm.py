"""ROCm checks on recorded AMD machines (tests/fixtures/amd: rocm-smi --json of real cards) and
the live AMD probe replaying the same recording through its command runner."""

from __future__ import annotations

import dataclasses

from dlrig import doctor
from dlrig.knowledge.command_check import check_command
from dlrig.machine import readers
from dlrig.machine.amd import probe
from dlrig.machine.model import Frameworks, Machine, Rocm, TorchInfo
from dlrig.machine.runner import CommandResult, ProbeContext
from tests.conftest import AMD


def _with_torch(machine: Machine, version: str, build: str, env=()) -> Machine:
    torch = TorchInfo(version=version, build=build, hip_version="6.0" if build == "rocm" else None)
    return dataclasses.replace(machine, frameworks=Frameworks(torch=torch), env=tuple(env))


def _result(machine: Machine, check_id: str):
    return next(r for r in doctor.run(machine=machine).checks if r.id == check_id)


def test_an_rx_6700_xt_has_no_code_in_the_official_wheels() -> None:
    # rocm-smi 6.1.2 of an RX 6700 XT: "GFX Version": "gfx1031"
    card = readers.load(AMD / "rx6700xt_rocm612.json")
    machine = _with_torch(card, "2.3.1+rocm6.0", "rocm")
    result = _result(machine, "rocm.gfx_in_build")
    assert result.status == "fail" and result.cause == "no_kernel_image"
    assert "gfx1031" in result.title
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" in (result.fix or "")
    # With the override set the user has made that choice: said, not failed.
    overridden = _with_torch(
        card, "2.3.1+rocm6.0", "rocm", env=[("HSA_OVERRIDE_GFX_VERSION", "10.3.0")]
    )
    assert _result(overridden, "rocm.gfx_in_build").status == "info"


def test_a_mi100_is_in_the_wheel_and_a_cpu_torch_is_told_the_rocm_index() -> None:
    card = readers.load(AMD / "mi100_rocm602.json")  # "Card series": "... [Instinct MI100]"
    assert _result(_with_torch(card, "2.3.1+rocm6.0", "rocm"), "rocm.gfx_in_build").status == "ok"
    cpu = _result(_with_torch(card, "2.3.1+cpu", "cpu"), "rocm.torch_build")
    assert cpu.status == "fail" and cpu.cause == "cpu_only_torch"
    assert "download.pytorch.org/whl/rocm" in (cpu.fix or "")
    assert check_command(cpu.fix or "") == []  # a wheel the release shipped


def test_newer_wheels_are_judged_by_their_sourced_arch_lists() -> None:
    """torch 2.5-2.11's ROCm wheels (pytorch_rocm_builds.csv, from pasted get_arch_list()
    outputs and the build script's history): gfx1031 is in none of them; the MI100 in all."""
    card = readers.load(AMD / "rx6700xt_rocm612.json")
    mi100 = readers.load(AMD / "mi100_rocm602.json")
    for version in ("2.5.1+rocm6.2", "2.7.1+rocm6.3", "2.9.0+rocm6.4", "2.11.0+rocm7.2"):
        result = _result(_with_torch(card, version, "rocm"), "rocm.gfx_in_build")
        assert result.status == "fail" and "gfx1031" in result.title, version
        assert _result(_with_torch(mi100, version, "rocm"), "rocm.gfx_in_build").status == "ok"


def test_device_access_names_the_groups() -> None:
    card = readers.load(AMD / "mi100_rocm602.json")
    denied = dataclasses.replace(
        card, rocm=Rocm(kfd_present=True, kfd_accessible=False, user_groups=("users",))
    )
    result = _result(denied, "rocm.device_access")
    assert result.status == "fail" and result.cause == "gpu_device_permission"
    assert "usermod -aG render,video" in (result.fix or "")
    missing = dataclasses.replace(card, rocm=Rocm(kfd_present=False))
    assert _result(missing, "rocm.device_access").cause == "no_amdgpu_driver"


class _RecordedRocmSmi:
    """rocm-smi as recorded on a real MI100 machine (telegraf's test data)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def which(self, name: str) -> str | None:
        return "/opt/rocm/bin/rocm-smi" if name == "rocm-smi" else None

    def run(self, argv, timeout_s, env=None) -> CommandResult:
        self.calls.append(tuple(argv))
        text = (AMD / "mi100_rocm571.json").read_text()
        return CommandResult(tuple(argv), 0, stdout=text)


def test_the_live_probe_reads_rocm_smi_and_the_release(tmp_path) -> None:
    (tmp_path / "opt/rocm/.info").mkdir(parents=True)
    (tmp_path / "opt/rocm/.info/version").write_text("5.7.1-98\n")
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/kfd").write_text("")
    runner = _RecordedRocmSmi()
    gpus, _topology, rocm, issues = probe(ProbeContext(runner=runner, root=tmp_path))
    assert issues == []
    assert gpus is not None and len(gpus) == 6 and gpus[0].name == "AMD Instinct MI100"
    assert rocm is not None and rocm.version == "5.7.1" and rocm.kfd_present
    assert rocm.amdgpu_driver_version == "6.2.4"  # the recording's "Driver version"
    assert runner.calls and runner.calls[0][-1] == "--json"


def test_no_rocm_means_no_section(tmp_path) -> None:
    class _Nothing(_RecordedRocmSmi):
        def which(self, name: str) -> str | None:
            return None

    assert probe(ProbeContext(runner=_Nothing(), root=tmp_path)) == (None, None, None, [])

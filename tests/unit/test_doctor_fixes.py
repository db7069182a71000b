"""Every install fix doctor prints comes from the resolver and names things that exist together.

Run over every recorded fixture and corpus paste (and merges of them), each fix is read back
by `check_command` against the tables with the machine's own GPUs and driver; the cases issue
9 lists get the right fix.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dlrig import doctor
from dlrig.doctor import installs
from dlrig.knowledge.command_check import check_command
from dlrig.machine import readers
from dlrig.machine.model import Frameworks, PackageInfo, TorchInfo
from dlrig.report import Status
from tests.conftest import CORPUS, NVSMI

SRC = Path(__file__).resolve().parents[2] / "src" / "dlrig" / "doctor"
INPUTS = sorted(
    [p for p in NVSMI.iterdir() if p.suffix in {".xml", ".txt", ".log"}]
    + [p for p in (CORPUS / "collect_env").glob("*.txt")]
)


@pytest.mark.parametrize("path", INPUTS, ids=[p.name for p in INPUTS])
def test_every_fix_checks_out_against_the_tables(path):
    machine = readers.load(path)
    for result in doctor.run(machine=machine).checks:
        if result.fix:
            problems = check_command(
                result.fix,
                installs.capabilities_of(machine),
                machine.driver.version if machine.driver else None,
                installs.platform_of(machine),
            )
            assert not problems, (result.id, result.fix, problems)


def test_no_check_builds_an_install_command_itself():
    offenders = []
    for source in SRC.glob("*.py"):
        if source.name == "installs.py":
            continue
        text = source.read_text(encoding="utf-8")
        for needle in ("download.pytorch.org", "--index-url", "nvidia-driver-5", "torch=="):
            if needle in text:
                offenders.append((source.name, needle))
    assert not offenders, offenders


def _with_torch(machine, torch: TorchInfo, **companions: PackageInfo):
    frameworks = dataclasses.replace(
        machine.frameworks or Frameworks(), torch=torch, duplicates=(), **companions
    )
    return dataclasses.replace(machine, frameworks=frameworks)


def test_keep_the_driver_cu118_torch_gets_cu118_companions_not_cu121():
    # A T4 on driver 515 (CUDA 11.7), torch 2.3.1+cu118 with a torchvision built for cu121.
    machine = _with_torch(
        readers.load(NVSMI / "tesla-t4-2procs-q-x.xml"),
        TorchInfo(version="2.3.1+cu118", build="cuda", cuda_version="11.8"),
        torchvision=PackageInfo(name="torchvision", version="0.18.1+cu121"),
    )
    result = next(r for r in doctor.run(machine=machine).checks if r.id == "frameworks.companions")
    assert result.status is Status.FAIL
    assert "cu121" not in result.fix
    assert (
        "torch==2.3.1 'torchvision==0.18.*' --index-url https://download.pytorch.org/whl/cu118"
        in result.fix
    )


def test_cpu_only_181_paste_gets_a_wheel_that_existed():
    machine = readers.load(CORPUS / "collect_env" / "cpuonly-conda-rtx3090-torch181.txt")
    result = next(
        r for r in doctor.run(machine=machine).checks if r.id == "frameworks.cpu_only_torch"
    )
    assert result.status is Status.FAIL
    first = result.fix.splitlines()[0]
    assert "torch==1.8.1" in first and "whl/cu111/torch_stable.html" in first
    assert "cu126" not in first


def test_driver_too_old_offers_the_wheel_the_driver_runs_and_the_upgrade():
    machine = readers.load(CORPUS / "collect_env" / "driver470-torch210-cu121-warning.txt")
    result = next(r for r in doctor.run(machine=machine).checks if r.id == "driver.torch_cuda")
    assert result.status is Status.FAIL
    # the need (CUDA 12.1's Table-3 minimum, an R530 release) and the branch to install, each
    # with its own number: never "≥ 530.30.02 (R580 LTSB ...)"
    assert "this needs ≥ 530.30.02" in result.fix
    assert "install the R580 LTSB (≥ 580.95.05" in result.fix
    assert "≥ 530.30.02 (R580" not in result.fix
    # keep the driver: CUDA 11.8 wheels of the same torch run on R470 by minor-version compat
    assert "torch==2.1.0" in result.fix and "whl/cu118" in result.fix

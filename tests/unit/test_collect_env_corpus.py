"""Real `collect_env` pastes from public bug reports: doctor names the cause each thread confirmed.

tests/corpus/collect_env/manifest.csv labels every paste with the problem its thread confirmed
and the thread's address; `none` means the environment was confirmed fine, `unknown` pastes
carry no label and only serve the runtime-evidence test. SPLIT.toml holds the held-out split,
frozen by thread before any rule was changed for it; accuracy is reported on each split.

    .venv/bin/python -m tests.unit.test_collect_env_corpus     # prints both figures
"""

from __future__ import annotations

import csv
import tomllib
from dataclasses import dataclass

import pytest

from dlrig import doctor
from dlrig.doctor import installs
from dlrig.knowledge.command_check import check_command
from dlrig.machine import readers
from dlrig.report import Status
from tests.conftest import CORPUS

FOLDER = CORPUS / "collect_env"
ROWS = list(csv.DictReader((FOLDER / "manifest.csv").open(encoding="utf-8")))
LABELLED = [r for r in ROWS if r["expected_cause"] != "unknown"]
SPLIT = tomllib.loads((FOLDER / "SPLIT.toml").read_text(encoding="utf-8"))
HELD_OUT = set(SPLIT["held_out"])
TARGET = 0.9


@dataclass(frozen=True)
class Outcome:
    file: str
    split: str
    expected: str
    failing: tuple[tuple[str, str | None], ...]  # (check id, cause) of every failing check

    @property
    def correct(self) -> bool:
        causes = {cause for _, cause in self.failing if cause}
        if self.expected == "none":
            return not self.failing
        return self.expected in causes


def outcome(row: dict[str, str]) -> Outcome:
    report = doctor.run(readers.load(FOLDER / row["file"]))
    failing = tuple((r.id, r.cause) for r in report.checks if r.status is Status.FAIL)
    split = "held_out" if row["file"] in HELD_OUT else "development"
    return Outcome(row["file"], split, row["expected_cause"], failing)


def accuracy() -> dict[str, tuple[int, int]]:
    """(correct, total) per split."""
    figures: dict[str, tuple[int, int]] = {"held_out": (0, 0), "development": (0, 0)}
    for row in LABELLED:
        result = outcome(row)
        right, total = figures[result.split]
        figures[result.split] = (right + result.correct, total + 1)
    return figures


def test_corpus_is_large_enough_and_labelled():
    assert len(LABELLED) >= 30
    for row in ROWS:
        assert row["url"].startswith("https://github.com/"), row
        assert row["confirmation"].strip(), row
        assert (FOLDER / row["file"]).is_file(), row
    assert {r["expected_cause"] for r in LABELLED} >= {
        "none",
        "cpu_only_torch",
        "driver_too_old",
        "no_kernel_image",
        "version_mismatch_torch_torchvision",
    }


def test_held_out_split_is_frozen_by_thread_and_large_enough():
    files = {r["file"] for r in LABELLED}
    assert files >= HELD_OUT, HELD_OUT - files
    assert len(HELD_OUT) * 3 >= len(LABELLED)
    assert SPLIT["frozen"] == "2026-12-01"
    urls = {r["file"]: r["url"] for r in ROWS}
    # by thread: no thread has pastes on both sides
    held_urls = {urls[f] for f in HELD_OUT}
    assert not {urls[f] for f in files - HELD_OUT} & held_urls


def test_accuracy_on_each_split_meets_the_target():
    figures = accuracy()
    for split, (right, total) in figures.items():
        print(f"{split}: {right}/{total} = {right / total:.0%}")
    right, total = figures["held_out"]
    assert right / total >= TARGET, figures
    right, total = figures["development"]
    assert right / total >= TARGET, figures


@pytest.mark.parametrize("row", LABELLED, ids=[r["file"] for r in LABELLED])
def test_doctor_names_the_confirmed_cause(row):
    result = outcome(row)
    assert result.correct, (row["expected_cause"], result.failing)


def test_runtime_evidence_outranks_a_table_minimum():
    """A paste that says CUDA ran never gets a failing driver check (both facts are shown)."""
    checked = 0
    for row in ROWS:
        machine = readers.load(FOLDER / row["file"])
        torch = machine.frameworks.torch if machine.frameworks else None
        if not (torch and torch.cuda_available):
            continue
        checked += 1
        report = doctor.run(machine)
        failing = [r.id for r in report.checks if r.area == "driver" and r.status is Status.FAIL]
        assert not failing, (row["file"], failing)
    assert checked >= 10
    # the paste whose driver is below NVIDIA's table but ran CUDA: a warning naming both
    machine = readers.load(FOLDER / "unknown-p100-torch140-cu100-driver384-available.txt")
    result = next(r for r in doctor.run(machine).checks if r.id == "driver.torch_cuda")
    assert result.status is Status.WARN
    assert "410.48" in result.title and any("is_available() was True" in e for e in result.evidence)


def test_every_fix_names_a_wheel_index_and_driver_that_exist_together():
    commands = 0
    for row in ROWS:
        machine = readers.load(FOLDER / row["file"])
        capabilities = installs.capabilities_of(machine)
        driver = machine.driver.version if machine.driver else None
        for result in doctor.run(machine).checks:
            if not result.fix:
                continue
            commands += "pip install" in result.fix
            problems = check_command(
                result.fix, capabilities, driver, installs.platform_of(machine)
            )
            assert not problems, (row["file"], result.id, result.fix, problems)
    assert commands >= 8


def test_messy_paste_with_full_width_colons_and_no_colon():
    machine = readers.load(FOLDER / "driver410-torch150-cu102-fullwidth-colons.txt")
    # "PyTorch version 1.5.0" (no colon), "GPU 0： Tesla P100-PCIE-16GB" (full-width colons)
    assert machine.frameworks.torch.version == "1.5.0"
    assert [g.name for g in machine.gpus] == ["Tesla P100-PCIE-16GB"] * 4
    assert machine.driver.version == "410.104"


def test_quoted_paste_is_unquoted():
    machine = readers.load(FOLDER / "none-win-server-titanrtx-torch150-cu101-quoted.txt")
    assert machine.frameworks.torch.cuda_available is True
    assert [g.name for g in machine.gpus] == ["TITAN RTX", "TITAN RTX"]


def test_sectioned_layout_of_newer_collect_env():
    machine = readers.load(FOLDER / "none-vllm-sectioned-v100-torch260.txt")
    assert machine.frameworks.torch.version == "2.6.0+cu124"
    assert machine.frameworks.torch.cuda_available is True
    assert machine.gpus[0].name == "Tesla V100-PCIE-32GB"


def test_warning_inside_output_gives_arch_list_and_capability():
    machine = readers.load(FOLDER / "sm120-rtx5090d-cu126.txt")
    torch = machine.frameworks.torch
    assert torch.arch_list[-1] == "sm_90"
    assert machine.gpus[0].compute_capability == "12.0"


def test_driver_too_old_warning_gives_driver_cuda():
    machine = readers.load(FOLDER / "driver470-torch210-cu121-warning.txt")
    # "...too old (found version 11040)" -> the driver supports CUDA 11.4
    assert machine.driver.cuda_version == "11.4"


def test_rtx5090_on_driver_570_gets_cu128_from_every_check():
    machine = readers.load(FOLDER / "sm120-rtx5090d-cu126.txt")
    fixes = [r.fix for r in doctor.run(machine).checks if r.fix and "pip install" in r.fix]
    assert fixes
    for fix in fixes:
        first = fix.splitlines()[0]
        assert "whl/cu128" in first and "cu132" not in first, fix


def test_cpu_build_cut_before_the_gpu_lines_is_flagged_from_the_cuda_install():
    machine = readers.load(FOLDER / "cpuonly-nightly-conda-cut-before-gpu-torch210dev.txt")
    assert machine.gpus is None and machine.driver.version is None
    result = next(r for r in doctor.run(machine).checks if r.id == "frameworks.cpu_only_torch")
    assert result.status is Status.FAIL
    assert any("11.8.89" in e for e in result.evidence)


def test_cpu_build_without_any_cuda_evidence_is_fine():
    for name in (
        "none-cpu-amd-laptop-torch260cpu.txt",
        "none-win-cpu-nightly-torch280dev-maintainer.txt",
    ):
        machine = readers.load(FOLDER / name)
        result = next(r for r in doctor.run(machine).checks if r.id == "frameworks.cpu_only_torch")
        assert result.status is Status.OK, (name, result)


if __name__ == "__main__":
    for split, (right, total) in accuracy().items():
        print(f"collect_env {split}: {right}/{total} = {right / total:.1%}")


def test_cuda_packages_alone_mark_a_cpu_build_as_wrong():
    """A +cpu torch next to pytorch-cuda or nvidia-*-cu12 wheels: someone meant CUDA."""
    import dataclasses

    machine = readers.load(FOLDER / "none-cpu-amd-laptop-torch260cpu.txt")
    for package in (("pytorch-cuda", "12.1"), ("nvidia-cublas-cu12", "12.1.3.1")):
        frameworks = dataclasses.replace(machine.frameworks, packages=(package,))
        changed = dataclasses.replace(machine, frameworks=frameworks)
        result = next(r for r in doctor.run(changed).checks if r.id == "frameworks.cpu_only_torch")
        assert result.status is Status.FAIL, package
        assert any(package[0] in e for e in result.evidence)

"""Real `collect_env` pastes from public bug reports: doctor names the cause each thread confirmed.

tests/corpus/collect_env/manifest.csv labels every paste with the problem its thread confirmed
and the thread's address; `none` means the environment was confirmed fine, `unknown` pastes
carry no label and only serve the runtime-evidence test. SPLIT.toml holds the held-out split,
frozen by thread before any rule was changed for it, and the external re-measurement (25 pastes
from other threads, with a third chosen by hash and not looked at while doctor was changed);
accuracy is reported on each split.

    .venv/bin/python -m tests.unit.test_collect_env_corpus     # prints every figure
"""

from __future__ import annotations

import csv
import hashlib
import math
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
EXTERNAL = set(SPLIT["external"]["files"])
UNSEEN = set(SPLIT["external"]["unseen"])
ROCM = set(SPLIT["rocm"]["files"])
ROCM2 = set(SPLIT["rocm2"]["files"])
ROCM3 = set(SPLIT["rocm3"]["files"])
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
    report = doctor.run(machine=readers.load(FOLDER / row["file"]))
    failing = tuple((r.id, r.cause) for r in report.checks if r.status is Status.FAIL)
    name = row["file"]
    split = (
        "held_out"
        if name in HELD_OUT
        else "external"
        if name in EXTERNAL
        else "rocm"
        if name in ROCM | ROCM2
        else "development"
    )
    return Outcome(name, split, row["expected_cause"], failing)


def accuracy() -> dict[str, tuple[int, int]]:
    """(correct, total) per split; `external_unseen` is the part of `external` kept unseen."""
    splits = ("held_out", "development", "external", "external_unseen", "rocm")
    figures = {name: (0, 0) for name in splits}
    for row in LABELLED:
        result = outcome(row)
        splits = [result.split] + (["external_unseen"] if row["file"] in UNSEEN else [])
        for split in splits:
            right, total = figures[split]
            figures[split] = (right + result.correct, total + 1)
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
    assert files >= HELD_OUT | EXTERNAL, (HELD_OUT | EXTERNAL) - files
    assert len(HELD_OUT) * 3 >= len(files - EXTERNAL - ROCM - ROCM2)
    assert SPLIT["frozen"] == "2026-12-01" and SPLIT["external"]["frozen"] == "2026-12-01"
    urls = {r["file"]: r["url"] for r in ROWS}
    # by thread: no thread has pastes on two sides
    held_urls = {urls[f] for f in HELD_OUT}
    external_urls = {urls[f] for f in EXTERNAL}
    development = {urls[f] for f in set(urls) - HELD_OUT - EXTERNAL - ROCM - ROCM2}
    assert not development & held_urls and not external_urls & (held_urls | development)
    rocm_urls = {urls[f] for f in ROCM | ROCM2}
    assert not rocm_urls & (held_urls | external_urls | development)


def test_the_rocm_blind_set():
    """Measured once, blind, before any change (commit 4fb4a72): the one paste whose problem is
    in the vocabulary (an RX 5700 XT, gfx1010, under a nightly whose ROCm build has no gfx1010)
    named right, and none of the five clean pastes failed. The two WSL support problems are
    outside the vocabulary (labelled unknown); the issue's 90% on ROCm pastes cannot be measured
    on three confirmed problems."""
    rows = [r for r in ROWS if r["file"] in ROCM]
    assert len(rows) == len(ROCM) == 8
    labelled = [outcome(r) for r in rows if r["expected_cause"] != "unknown"]
    problems = [o for o in labelled if o.expected != "none"]
    clean = [o for o in labelled if o.expected == "none"]
    print(
        f"\nrocm: problems {sum(o.correct for o in problems)}/{len(problems)}, "
        f"clean {sum(o.correct for o in clean)}/{len(clean)}"
    )
    assert (len(problems), len(clean)) == (1, 5)
    assert all(o.correct for o in labelled), [o for o in labelled if not o.correct]


def test_the_second_rocm_set():
    """Found by a helper asked for ROCm pastes with confirmed gfx, wheel, version or access
    problems: none could be copied whole, so the set holds 7 clean pastes and one platform
    outside the vocabulary. Measured once at commit 4534887: 4 of 7 clean without a false
    failure; the three were torchvision's release pairing judged between two source or vendor
    builds (changed since, so this set is no longer blind)."""
    rows = [r for r in ROWS if r["file"] in ROCM2]
    assert len(rows) == len(ROCM2) == 8
    clean = [outcome(r) for r in rows if r["expected_cause"] == "none"]
    print(f"\nrocm2: clean {sum(o.correct for o in clean)}/{len(clean)}")
    assert len(clean) == 7
    assert all(o.correct for o in clean), [o for o in clean if not o.correct]


def test_the_third_rocm_set():
    """Two more helpers, asked again for ROCm pastes with confirmed problems and allowed pastes
    cut inside their CPU section, found four: one confirmed fine and three that carry no label
    (the one problem in the vocabulary, a CPU wheel on an AMD APU, is invisible in torch 0.4's
    collect_env). Measured once at commit 50d73e7: the clean paste had two false failures (a HIP
    build read as CPU-only though torch.cuda answered True; torchvision 0.2.1, which had no
    compiled operators, paired with torch). Both rules were changed; no longer blind."""
    rows = [r for r in ROWS if r["file"] in ROCM3]
    assert len(rows) == len(ROCM3) == 4
    clean = [outcome(r) for r in rows if r["expected_cause"] == "none"]
    assert len(clean) == 1
    assert all(o.correct for o in clean), [o for o in clean if not o.correct]
    # the unlabelled ones are outside the vocabulary or show nothing: no false failure either
    for row in rows:
        assert not outcome({**row, "expected_cause": "none"}).failing, row["file"]


def test_unseen_third_follows_the_hash_rule():
    """The unseen third is the first ceil(n/3) external threads by SHA-256 of their URL."""
    urls = {r["file"]: r["url"] for r in ROWS if r["file"] in EXTERNAL}
    threads = sorted(set(urls.values()), key=lambda u: hashlib.sha256(u.encode()).hexdigest())
    unseen_threads = set(threads[: math.ceil(len(threads) / 3)])
    assert {f for f, u in urls.items() if u in unseen_threads} == UNSEEN


def test_accuracy_on_each_split_meets_the_target():
    figures = accuracy()
    for split, (right, total) in figures.items():
        print(f"{split}: {right}/{total} = {right / total:.0%}")
    for split in ("held_out", "development", "external", "rocm"):
        right, total = figures[split]
        assert right / total >= TARGET, figures


# Misses measured and left as they are, with why (each flips to a failure once doctor gets it).
KNOWN_MISSES = {
    "nodriver-warning-torch170cu110-centos.txt": "torch's 'Found no NVIDIA driver' warning alone "
    "does not show an NVIDIA GPU exists and the paste is cut before any GPU line: doctor warns",
}


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[r["file"]]))
        if r["file"] in KNOWN_MISSES
        else r
        for r in LABELLED
    ],
    ids=[r["file"] for r in LABELLED],
)
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
        report = doctor.run(machine=machine)
        failing = [r.id for r in report.checks if r.area == "driver" and r.status is Status.FAIL]
        assert not failing, (row["file"], failing)
    assert checked >= 10
    # the paste whose driver is below NVIDIA's table but ran CUDA: a warning naming both
    machine = readers.load(FOLDER / "unknown-p100-torch140-cu100-driver384-available.txt")
    result = next(r for r in doctor.run(machine=machine).checks if r.id == "driver.torch_cuda")
    assert result.status is Status.WARN
    assert "410.48" in result.title and any("is_available() was True" in e for e in result.evidence)


def test_every_fix_names_a_wheel_index_and_driver_that_exist_together():
    commands = 0
    for row in ROWS:
        machine = readers.load(FOLDER / row["file"])
        capabilities = installs.capabilities_of(machine)
        driver = machine.driver.version if machine.driver else None
        for result in doctor.run(machine=machine).checks:
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
    fixes = [r.fix for r in doctor.run(machine=machine).checks if r.fix and "pip install" in r.fix]
    assert fixes
    for fix in fixes:
        first = fix.splitlines()[0]
        assert "whl/cu128" in first and "cu132" not in first, fix


def test_cpu_build_cut_before_the_gpu_lines_is_flagged_from_the_cuda_install():
    machine = readers.load(FOLDER / "cpuonly-nightly-conda-cut-before-gpu-torch210dev.txt")
    assert machine.gpus is None and machine.driver.version is None
    result = next(
        r for r in doctor.run(machine=machine).checks if r.id == "frameworks.cpu_only_torch"
    )
    assert result.status is Status.FAIL
    assert any("11.8.89" in e for e in result.evidence)


def test_cpu_build_without_any_cuda_evidence_is_fine():
    for name in (
        "none-cpu-amd-laptop-torch260cpu.txt",
        "none-win-cpu-nightly-torch280dev-maintainer.txt",
    ):
        machine = readers.load(FOLDER / name)
        result = next(
            r for r in doctor.run(machine=machine).checks if r.id == "frameworks.cpu_only_torch"
        )
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
        result = next(
            r for r in doctor.run(machine=changed).checks if r.id == "frameworks.cpu_only_torch"
        )
        assert result.status is Status.FAIL, package
        assert any(package[0] in e for e in result.evidence)


# --- rules read from torch/utils/collect_env.py, each on real pastes ---------------------------


def test_could_not_collect_build_means_a_cpu_torch_where_cuda_parts_exist():
    """'CUDA used to build PyTorch: Could not collect' (torch imported): torch.version.cuda is
    None and collect_env found nvcc, a GPU or a driver; 'None' means it found none of them."""
    cut = readers.load(FOLDER / "cpuonly-win-torch171cpu-cut-before-gpu.txt")
    assert cut.gpus is None and cut.cuda_toolkit is None  # cut before those lines
    assert cut.frameworks.torch.build == "cpu" and cut.frameworks.torch.cuda_parts_found
    result = next(r for r in doctor.run(machine=cut).checks if r.id == "frameworks.cpu_only_torch")
    assert result.status is Status.FAIL
    assert any("Could not collect" in e for e in result.evidence)
    full = readers.load(FOLDER / "cpuonly-couldnotcollect-win-rtx4080laptop-torch222.txt")
    assert full.frameworks.torch.cuda_parts_found and full.gpus
    for name in ("none-cpu-amd-laptop-torch260cpu.txt", "none-macos-torch222-cpu.txt"):
        torch = readers.load(FOLDER / name).frameworks.torch
        assert torch.build == "cpu" and not torch.cuda_parts_found, name


def test_markdown_emphasis_around_lines_is_read_through():
    machine = readers.load(FOLDER / "none-conda-torch131-cu100-markdown-bold.txt")
    torch = machine.frameworks.torch
    # "**CUDA used to build PyTorch: 10.0.130**", "**Is CUDA available: Yes"
    assert (torch.build, torch.cuda_version, torch.cuda_available) == ("cuda", "10.0.130", True)


def test_companions_and_duplicates_follow_the_imported_torch():
    """Old collect_env ran pip3 from PATH: here another Python's torch 1.2.0, while conda's
    pytorch 1.3.0 (cu101) is the one imported. The conda torchvision pairs with it."""
    machine = readers.load(FOLDER / "driver410-torch130-cu101-t4-conda-plus-pip3.txt")
    fw = machine.frameworks
    assert fw.torch.installer == "conda"
    assert (fw.torchvision.version, fw.torchvision.installer) == ("0.4.1", "conda")
    assert fw.duplicates[0].versions == ("1.2.0", "1.3.0")
    results = {r.id: r for r in doctor.run(machine=machine).checks}
    assert results["frameworks.companions"].status is Status.OK
    assert results["driver.torch_cuda"].status is Status.FAIL
    assert "418.39" in results["driver.torch_cuda"].title


def test_source_build_git_hashes_are_not_two_installs():
    # PyTorch version 1.7.0a0+9ddd3df, [pip3] torch==1.7.0a0+a9603c7: one source build.
    machine = readers.load(FOLDER / "none-rocm-maintainer-sample-torch170a0.txt")
    assert machine.frameworks.duplicates == ()


def test_legacy_pip_list_form_is_read():
    machine = readers.load(FOLDER / "none-nightly-gtx1070-torch100dev.txt")
    assert machine.frameworks.torch.installer == "pip"  # "[pip] torch (1.0.0.dev20181022)"
    assert ("numpy", "1.15.2") in machine.frameworks.packages


def test_last_gpu_line_cut_mid_name_is_completed():
    machine = readers.load(FOLDER / "none-vllm-omni-h20x8-torch2100cu128.txt")
    assert [g.name for g in machine.gpus] == ["NVIDIA H20"] * 8  # the paste ends "GPU 7: NVID"


def test_rocm_build_is_not_judged_by_an_nvidia_driver_next_to_it():
    machine = readers.load(FOLDER / "none-rocm-gfx906-with-nvidia-driver-line.txt")
    assert machine.frameworks.torch.build == "rocm" and machine.driver.version == "550.90.07"
    assert not [r.id for r in doctor.run(machine=machine).checks if r.status is Status.FAIL]


def test_wsl_gpus_run_on_the_windows_hosts_driver():
    from dlrig.doctor import facts

    machine = readers.load(FOLDER / "mismatch-wsl-torch1102cu113-tv0113rocm.txt")
    assert machine.os.kernel_release.endswith("microsoft-standard-WSL2")
    assert facts.driver_on_windows(machine) and installs.platform_of(machine) == "linux-x86_64"
    text = installs.driver_install_text(machine, None, doctor.DoctorOptions().today)
    assert "nvidia.com/Download" in text and "WSL" in text and "apt" not in text


def test_only_two_source_builds_escape_the_release_pairing():
    """Versions as real pastes print them (this corpus): source builds pair by the torch they
    were compiled against, so their release pairing is not judged; nightlies and AMD's release
    wheels are still paired."""
    from dlrig.doctor.frameworks import _source_build

    sources = ("2.11.0+gitd0c8b1f", "0.24.1+d801a34", "2.8.0a0+gitfc14c65", "0.24.0a0+c85f008")
    kept = (
        "2.5.0.dev20240802+rocm6.1",  # a nightly
        "2.4.0.dev20240802+rocm6.1",
        "2.4.0+rocm6.3.4.git7cecbf6d",  # AMD's release wheels of a torch release
        "0.19.0+rocm6.3.4.gitfab84886",
        "2.9.1+rocm7.2.0.lw.git7e1940d4",
    )
    assert all(_source_build(v) for v in sources)
    assert not any(_source_build(v) for v in kept)
    for v in sources + kept:  # every one of them is in a paste of this corpus
        assert any(v in p.read_text(encoding="utf-8") for p in FOLDER.glob("*.txt")), v

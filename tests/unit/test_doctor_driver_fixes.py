"""Driver verdicts and driver fixes on real recordings: branch end of life (R470, R590,
branches NVIDIA no longer lists), fixes bounded by the GPU's last branch, one number per
branch in a report, the package named from the same policy `dlrig provision host` uses, and
no "(CUDA ≤ ?)" where the driver's version says it.

Every machine here is a real recorded output (tests/fixtures/nvidia-smi) or a real paste
(tests/corpus/collect_env); the verdicts are checked against NVIDIA's tables as dlrig ships them.
"""

from __future__ import annotations

import re

import pytest

from dlrig import doctor
from dlrig.doctor import installs
from dlrig.doctor.render import machine_facts, render_markdown, split_fix_line
from dlrig.knowledge import architectures
from dlrig.machine import readers
from dlrig.report import Status
from tests.conftest import CORPUS, NVSMI

PASTES = CORPUS / "collect_env"
INPUTS = sorted(
    [p for p in NVSMI.iterdir() if p.suffix in {".xml", ".txt"}] + list(PASTES.glob("*.txt"))
)


def _check(path, check_id):
    machine = readers.load(path)
    return machine, next(r for r in doctor.run(machine=machine).checks if r.id == check_id)


# --- 1: R470 and the other branches NVIDIA's table no longer lists ---------------------------


@pytest.mark.parametrize(
    "path",
    [
        NVSMI / "table-470.57.02-quadro-p1000.txt",
        NVSMI / "table-470.82.01-a100-pcie-cuda-na.txt",
        PASTES / "cpuonly-conda-rtx3090-torch181.txt",  # driver 470.182.03
    ],
    ids=lambda p: p.name,
)
def test_r470_is_an_end_of_life_long_term_branch(path):
    _, result = _check(path, "driver.branch_eol")
    assert result.status is Status.WARN
    assert "R470 (LTSB) reached end of life in 2024-07" in result.title
    # Pascal, Ampere: R580 runs them; the fix names it
    assert "R580 LTSB" in result.fix


def test_r590_is_a_new_feature_branch_and_the_fix_moves_forward_not_back():
    # H200 capture, driver 590.48.01: a verdict, and the supported branch at or above it
    _, result = _check(NVSMI / "h200-capture-idle-load.txt", "driver.branch_eol")
    assert result.status is Status.WARN
    assert "new feature branch" in result.title
    assert "R595 PB" in result.fix and "R580" not in result.fix


def test_a_branch_older_than_every_supported_one_is_end_of_life():
    # 342.01 (GeForce 210, Windows 7): NVIDIA says every branch it no longer lists is EOL
    _, result = _check(PASTES / "geforce210-unsupported-gpu-torch120.txt", "driver.branch_eol")
    assert result.status is Status.WARN
    assert "past end of life" in result.title


# --- 3/43: the GPU's last branch bounds every fix --------------------------------------------


def test_a_gpu_no_newer_driver_supports_gets_no_impossible_upgrade():
    machine = readers.load(PASTES / "geforce210-unsupported-gpu-torch120.txt")
    results = {r.id: r for r in doctor.run(machine=machine).checks}
    for check_id in ("driver.torch_cuda", "cuda.nvcc_vs_driver", "driver.branch_eol"):
        fix = results[check_id].fix
        assert "Upgrade the NVIDIA driver" not in fix, (check_id, fix)
        assert "no newer driver supports this GPU" in fix and "R340" in fix, (check_id, fix)
        # no wheel has kernels for sm_12: keep the driver and use the CPU build, or a new GPU
        assert "replace the GPU" in fix and "whl/cpu" in fix


_INSTALL = re.compile(
    r"install the (?P<b1>R\d+) \w+ \(≥ (?P<v1>\d[\d.]*)|to ≥ (?P<v2>\d[\d.]*) \((?P<b2>R\d+)"
)


@pytest.mark.parametrize("path", INPUTS, ids=[p.name for p in INPUTS])
def test_driver_fixes_name_one_release_per_branch_and_none_past_the_gpus_last(path):
    machine = readers.load(path)
    limit = architectures.driver_limit(installs.capabilities_of(machine))
    per_branch: dict[str, set[str]] = {}
    for result in doctor.run(machine=machine).checks:
        for match in _INSTALL.finditer(result.fix or ""):
            branch = match.group("b1") or match.group("b2")
            version = match.group("v1") or match.group("v2")
            # the number shown with a branch is a release of that branch
            assert version.split(".")[0] == branch[1:], (result.id, result.fix)
            per_branch.setdefault(branch, set()).add(version)
            if limit is not None and limit.last_branch is not None:
                assert int(branch[1:]) <= limit.last_branch, (result.id, result.fix)
    assert all(len(v) == 1 for v in per_branch.values()), per_branch


def test_the_package_follows_the_architecture_like_provision():
    # Pascal (Quadro P1000): proprietary modules -> cuda-drivers / nvidia-driver-580;
    # Ampere (A100): open modules -> nvidia-open / nvidia-driver-580-server-open
    _, pascal = _check(NVSMI / "table-470.57.02-quadro-p1000.txt", "driver.branch_eol")
    assert "nvidia-driver-pinning-580 cuda-drivers" in pascal.fix
    assert "proprietary kernel modules" in pascal.fix and "nvidia-open" not in pascal.fix
    _, ampere = _check(NVSMI / "table-470.82.01-a100-pcie-cuda-na.txt", "driver.branch_eol")
    assert "nvidia-driver-pinning-580 nvidia-open" in ampere.fix
    assert "nvidia-driver-580-server-open" in ampere.fix
    assert "cuda-drivers" not in ampere.fix


def test_rocky_paste_gets_the_dnf_stream_provision_uses():
    # A CentOS paste: the RPM family's command (NVIDIA's dnf module stream), not apt's
    machine = readers.load(PASTES / "nodriver-warning-torch170cu110-centos.txt")
    text = installs.driver_install_text(machine, None, doctor.DoctorOptions().today)
    _, command = split_fix_line(text)
    assert command is not None and command.startswith("sudo dnf module enable -y nvidia-driver:580")
    assert "apt install" not in text


# --- 2/45: the driver's CUDA where its version implies it ------------------------------------


@pytest.mark.parametrize("path", INPUTS, ids=[p.name for p in INPUTS])
def test_no_unknown_cuda_is_printed_next_to_a_known_driver(path):
    rows = dict(machine_facts(readers.load(path)))
    assert "CUDA ≤ ?" not in rows.get("driver", "")


def test_a_driver_without_a_reported_cuda_gets_it_from_nvidias_table():
    # "CUDA Version: N/A" in this table; 470.82.01 is CUDA 11.4's minimum
    rows = dict(machine_facts(readers.load(NVSMI / "table-470.82.01-a100-pcie-cuda-na.txt")))
    assert rows["driver"] == "470.82.01 (CUDA ≤ 11.4 per NVIDIA's table)"


# --- 4: the CPU-only verdict says why ----------------------------------------------------------


def test_cpu_only_torch_on_a_machine_without_gpu_names_the_toolkit_it_has():
    # The live probe of this machine (real, not recorded): no GPU; whether nvcc is there
    # decides which reason is true.
    from dlrig.machine import probe
    from dlrig.machine.runner import ProbeContext

    machine = probe.collect(ProbeContext(read_kernel_log=False))
    result = next(
        r for r in doctor.run(machine=machine).checks if r.id == "frameworks.cpu_only_torch"
    )
    if result.status is Status.SKIP or machine.gpus:
        pytest.fail(f"this test needs the CPU-only dev machine: {result.title}")
    toolkit = machine.cuda_toolkit.nvcc_version if machine.cuda_toolkit else None
    if toolkit:
        assert f"CUDA toolkit {toolkit}" in result.title
        assert "no NVIDIA GPU or CUDA install recorded" not in result.title
    else:
        assert "no NVIDIA GPU or CUDA install recorded" in result.title


# --- 44: Markdown code blocks hold commands only -------------------------------------------------


def test_markdown_fences_hold_only_runnable_lines():
    machine = readers.load(PASTES / "sm120-rtx5090d-cu126.txt")
    text = render_markdown(doctor.run(machine=machine))
    blocks = re.findall(r"```sh\n(.*?)\n\s*```", text, re.S)
    assert blocks
    for block in blocks:
        line = block.strip()
        assert not line.startswith(("or", "then", "Upgrade", "(")), line
        assert re.match(r"(sudo|pip|python|conda|export|unset|nvidia-smi)\b", line), line


def test_split_fix_line_keeps_the_words_around_a_command_outside():
    prose, command = split_fix_line("or, on a driver older than R580 (from 570.26): pip install x")
    assert prose == "or, on a driver older than R580 (from 570.26):"
    assert command == "pip install x"
    assert split_fix_line("  then: pip install y") == ("then:", "pip install y")
    assert split_fix_line("Remove those directories from LD_LIBRARY_PATH.") == (
        "Remove those directories from LD_LIBRARY_PATH.",
        None,
    )

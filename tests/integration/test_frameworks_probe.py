"""The frameworks probe describes real torch installs without importing them.

The CUDA case uses the real PyTorch 2.14.1 CUDA 13.0 wheel (pip fetches it; the test is skipped
where it cannot be fetched): its version.py, dist-info and libtorch_python.so are unpacked into
a site folder, and the probe must read the architecture list that
`torch.cuda.get_arch_list()` returns for that build.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from dlrig.machine.frameworks import frameworks_from_probe, run_probe
from dlrig.machine.runner import ProbeContext

WHEEL_CACHE = Path(os.environ.get("DLRIG_TEST_WHEELS", "/tmp/dlrig-test-wheels"))


def _wheel(spec: str, pattern: str) -> Path:
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(WHEEL_CACHE.glob(pattern))
    if not found:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "-d",
                str(WHEEL_CACHE),
                spec,
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        found = sorted(WHEEL_CACHE.glob(pattern))
        if result.returncode != 0 or not found:
            pytest.skip(f"cannot fetch {spec}: {result.stderr.strip()[-200:]}")
    return found[0]


def _unpack(wheel: Path, target: Path, members: tuple[str, ...]) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith(members):
                archive.extract(name, target)


def _probe(site: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(site))
    return run_probe(ProbeContext(env=env, timeout_s=60))


def test_this_environment_cpu_torch():
    document = run_probe(ProbeContext(timeout_s=60))
    fw = frameworks_from_probe(document)
    assert fw.python_executable
    import torch  # the test environment's own torch, for comparison only

    assert fw.torch.version == torch.__version__
    assert fw.torch.cuda_version == torch.version.cuda  # None: the CPU build
    assert fw.torch.build == "cpu"
    assert fw.torch.arch_list == ()


def test_cuda_wheel_arch_list_read_from_the_binary(tmp_path):
    wheel = _wheel("torch==2.14.1", "torch-2.14.1-*.whl")
    _unpack(
        wheel,
        tmp_path,
        (
            "torch/version.py",
            "torch/__init__.py",
            "torch/lib/libtorch_python.so",
            "torch-2.14.1.dist-info/",
        ),
    )
    fw = frameworks_from_probe(_probe(tmp_path))
    assert fw.torch.version == "2.14.1+cu130"
    assert fw.torch.cuda_version == "13.0"
    assert fw.torch.build == "cuda"
    # what torch.cuda.get_arch_list() returns for this wheel (PyTorch's 2.14 CUDA 13.0 matrix)
    assert fw.torch.arch_list == ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")


def test_two_torch_installs_are_reported(tmp_path):
    cuda_wheel = _wheel("torch==2.14.1", "torch-2.14.1-*.whl")
    cpu_wheel = _wheel("torch==2.13.0", "torch-2.13.0*.whl")
    first, second = tmp_path / "user-site", tmp_path / "venv-site"
    _unpack(cuda_wheel, first, ("torch/version.py", "torch/__init__.py", "torch-2.14.1.dist-info/"))
    _unpack(
        cpu_wheel, second, ("torch/version.py", "torch/__init__.py", "torch-2.13.0+cpu.dist-info/")
    )
    env = dict(os.environ, PYTHONPATH=f"{first}:{second}")
    fw = frameworks_from_probe(run_probe(ProbeContext(env=env, timeout_s=60)))
    torch_duplicates = [d for d in fw.duplicates if d.name == "torch"]
    assert torch_duplicates, fw.duplicates
    assert set(torch_duplicates[0].versions) >= {"2.14.1", "2.13.0+cpu"}
    # the first path wins the import, as it would for the user
    assert fw.torch.version == "2.14.1+cu130"


def test_broken_interpreter_is_reported_not_raised(tmp_path):
    with pytest.raises(RuntimeError, match="not found"):
        run_probe(ProbeContext(python=str(tmp_path / "no-python"), timeout_s=10))

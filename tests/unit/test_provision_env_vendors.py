"""`provision env` for ROCm wheels and for TensorFlow/JAX: what is chosen from the tables, and
one clear line (exit 2) for what cannot be installed. Locking with the real resolver is in
tests/integration/test_provision_env_lock.py."""

from __future__ import annotations

import re

from dlrig.knowledge import framework_pins, rocm
from dlrig.knowledge.command_check import check_command


def test_a_rocm_variant_gets_the_newest_release_that_shipped_it(run_dlrig, tmp_path):
    result = run_dlrig(
        "provision", "env", "--cuda-variant", "rocm6.2", "--python", "3.11", "--out", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    lines = (tmp_path / "requirements-torch.txt").read_text()
    newest = [b.torch_version for b in rocm.builds() if b.rocm_variant == "rocm6.2"][-1]
    assert f"torch=={newest}.*" in lines
    assert "--index-url https://download.pytorch.org/whl/rocm6.2" in lines
    command = "pip install " + " ".join(
        line for line in lines.splitlines() if line and not line.startswith("#")
    )
    assert check_command(command) == []


def test_an_unknown_rocm_version_is_one_line_and_exit_2(run_dlrig, tmp_path):
    result = run_dlrig("provision", "env", "--cuda-variant", "rocm9.9", "--out", str(tmp_path))
    assert result.returncode == 2
    [line] = [x for x in result.stderr.splitlines() if x.strip()]
    assert "rocm9.9" in line and "rocm6.2" in line and "Traceback" not in result.stderr


def test_tensorflow_on_an_old_driver_gets_the_last_cuda_11_release(run_dlrig, tmp_path):
    # Driver 470 runs CUDA 11.x (minor-version compatibility) but no CUDA 12: TF 2.14 is the
    # last and-cuda release on CUDA 11 wheels (nvidia-*-cu11).
    result = run_dlrig(
        "provision",
        "env",
        "--framework",
        "tensorflow",
        "--gpu",
        "a100-sxm4-80gb",
        "--driver",
        "470.182.03",
        "--python",
        "3.11",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    requirement = re.search(
        r"^tensorflow\[and-cuda\]==([\d.]+)$", (tmp_path / "requirements.in").read_text(), re.M
    )
    assert requirement is not None
    pins = framework_pins.pins_for("tensorflow", requirement.group(1))
    assert pins and all(p.requirement.endswith("-cu11") for p in pins)


def test_jax_without_a_gpu_is_the_cpu_build(run_dlrig, tmp_path):
    result = run_dlrig(
        "provision",
        "env",
        "--framework",
        "jax",
        "--cuda-variant",
        "cpu",
        "--python",
        "3.12",
        "--out",
        str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "requirements.in").read_text()
    assert re.search(r"^jax==[\d.]+$", text, re.M), text

"""doctor on a real installed JAX: the CPU wheels of jax and jaxlib from PyPI, installed
without dependencies into a folder on PYTHONPATH, read by the frameworks probe from their own
metadata (the package index must be reachable, as for the lock tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata

import pytest

pytestmark = pytest.mark.integration


def test_doctor_reads_an_installed_cpu_jax(run_dlrig_process, tmp_path):
    target = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            "jax",
            "jaxlib",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr
    versions = {d.metadata["Name"]: d.version for d in metadata.distributions(path=[str(target)])}
    assert {"jax", "jaxlib"} <= set(versions)
    result = run_dlrig_process("doctor", "--json", env={"PYTHONPATH": str(target)}, timeout=300)
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    frameworks = document["machine"]["frameworks"]
    assert frameworks["jax"]["version"] == versions["jax"]
    assert frameworks["jaxlib"]["version"] == versions["jaxlib"]
    assert frameworks["jax_cuda_plugin"] is None  # the CPU wheels: no CUDA plugin
    checks = {c["id"]: c for c in document["checks"]}
    # No NVIDIA GPU here: a CPU jax is right, and there are no CUDA wheels to compare.
    assert checks["frameworks.jax_gpu"]["status"] == "ok"
    assert checks["frameworks.gpu_wheels_match"]["status"] == "skip"

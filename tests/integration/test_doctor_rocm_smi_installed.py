"""doctor runs the real `rocm-smi` (Debian's ROCm 5.2 package, installed by `make system`) with
the flags its AMD probe passes. This machine has no amdgpu driver, so the tool refuses; what
rocm-smi says is kept as the probe's reason, and no AMD check claims more than that."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from dlrig.machine.amd import ROCM_SMI_ARGS

pytestmark = pytest.mark.integration


def test_rocm_smi_accepts_every_flag_the_probe_passes():
    tool = shutil.which("rocm-smi")
    assert tool, "rocm-smi is installed by `make system` (.ci/system-packages.txt)"
    result = subprocess.run([tool, *ROCM_SMI_ARGS], capture_output=True, text=True, timeout=60)
    said = result.stdout + result.stderr
    # argparse would stop at an unknown flag before the tool looks for the driver
    assert "unrecognized arguments" not in said and "invalid choice" not in said, said
    assert "Driver not initialized" in said or '"card' in said, said


def test_doctor_keeps_what_the_real_rocm_smi_said(run_dlrig_process):
    if shutil.which("rocm-smi") is None:
        pytest.fail("rocm-smi is installed by `make system` (.ci/system-packages.txt)")
    result = run_dlrig_process("doctor", "--json", timeout=300)
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    machine = document["machine"]
    assert machine["rocm"]["tool"] == "rocm-smi"
    reasons = [i["reason"] for i in machine["probe_issues"] if i["source"] == "rocm"]
    if machine["rocm"]["kfd_present"]:
        pytest.fail("this test expects a machine without an AMD GPU")
    assert any("amdgpu not found" in r or "Driver not initialized" in r for r in reasons), reasons
    checks = {c["id"]: c for c in document["checks"]}
    # no GPU was read, so no AMD verdict is given
    for name in ("rocm.torch_build", "rocm.gfx_in_build", "rocm.device_access"):
        assert checks[name]["status"] == "skip", checks[name]


def test_the_amdsmi_binding_without_its_library_stays_out_of_the_output(run_dlrig_process):
    """The dev extra installs AMD's `amdsmi` binding, which prints two lines when it cannot find
    libamd_smi.so: the probe says why it fell back to rocm-smi, and --json stays one document."""
    result = run_dlrig_process("doctor", "--json", timeout=300)
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)  # nothing but the document on stdout
    machine = document["machine"]
    reasons = [i["reason"] for i in machine["probe_issues"] if i["source"] == "rocm"]
    assert any("libamd_smi.so" in r for r in reasons), reasons
    assert machine["rocm"]["tool"] == "rocm-smi"

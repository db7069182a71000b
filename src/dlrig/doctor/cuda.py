"""CUDA toolkit and library checks: nvcc vs torch, nvcc vs driver, loader path, visible devices."""

from __future__ import annotations

import re

from dlrig.doctor import facts, installs
from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge.versions import Version
from dlrig.machine.model import Machine
from dlrig.report import CheckResult


@check("cuda.nvcc_vs_torch", "nvcc's CUDA matches torch's")
def nvcc_vs_torch(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """pip and conda wheels bring their own CUDA runtime, so the toolkit on PATH does not
    matter for running torch. It matters for compiling extensions (flash-attn, apex, DeepSpeed
    ops, torch.utils.cpp_extension): they must be built with the same CUDA major as torch, and
    DeepSpeed refuses most minor mismatches too."""
    build = facts.torch_cuda(m)
    if build is None:
        return c.skip("torch is not a CUDA build")
    if m.cuda_toolkit is None:
        return c.skip("CUDA toolkit not in this snapshot")
    nvcc = m.cuda_toolkit.nvcc_version
    if nvcc is None:
        return c.info(
            "no CUDA toolkit (nvcc): fine for running torch, needed only to compile CUDA extensions",
            fix=f"If you build extensions: install the CUDA {build} toolkit and set CUDA_HOME",
        )
    have, want = Version.parse(nvcc), Version.parse(build)
    if have is None or want is None:
        return c.skip(f"cannot compare nvcc {nvcc!r} with torch's CUDA {build!r}")
    if have.major != want.major:
        return c.warn(
            f"nvcc is CUDA {have.truncated(2)}, torch is built for CUDA {build}: extensions will not build",
            f"nvcc {nvcc}"
            + (f" at {m.cuda_toolkit.nvcc_path}" if m.cuda_toolkit.nvcc_path else ""),
            fix=f"Install the CUDA {build} toolkit and export CUDA_HOME=/usr/local/cuda-{build}",
            cause=None,
        )
    if have.truncated(2) != want.truncated(2):
        return c.info(
            f"nvcc is CUDA {have.truncated(2)}, torch's CUDA is {build} (same major: usually fine)",
            f"nvcc {nvcc}",
            "DeepSpeed's op builder rejects some minor mismatches (set DS_SKIP_CUDA_CHECK=1)",
        )
    return c.ok(f"nvcc {nvcc} matches torch's CUDA {build}")


@check("cuda.nvcc_vs_driver", "the driver supports the installed CUDA toolkit")
def nvcc_vs_driver(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Programs compiled with a toolkit newer than the driver supports fail to start
    ('CUDA driver version is insufficient for CUDA runtime version')."""
    if m.cuda_toolkit is None or m.cuda_toolkit.nvcc_version is None:
        return c.skip("no CUDA toolkit")
    if m.driver is None or not (m.driver.version or m.driver.cuda_version):
        return c.skip("no driver version")
    windows = facts.driver_on_windows(m)
    requirement = cuda_knowledge.driver_requirement(m.cuda_toolkit.nvcc_version, windows=windows)
    driver = Version.parse(m.driver.version) if m.driver.version else None
    if requirement and driver:
        if driver >= requirement.full_support:
            return c.ok(
                f"driver {m.driver.version} supports CUDA toolkit {m.cuda_toolkit.nvcc_version}"
            )
        if requirement.minor_compat_floor and driver >= requirement.minor_compat_floor:
            return c.info(
                f"driver {m.driver.version} runs toolkit {m.cuda_toolkit.nvcc_version} only through "
                f"minor-version compatibility (PTX JIT needs ≥ {requirement.full_support})"
            )
        return c.warn(
            f"CUDA toolkit {m.cuda_toolkit.nvcc_version} needs driver ≥ {requirement.full_support}; "
            f"driver is {m.driver.version}",
            fix=installs.driver_install_text(m, requirement.full_support, o.today)
            + "\nOr use a CUDA toolkit this driver supports.",
            cause="driver_too_old",
        )
    return c.skip("toolkit or driver not in the compatibility table")


_CUDA_LIB_DIR = re.compile(r"cuda[-_]?(\d+)(?:\.(\d+))?")


@check(
    "cuda.ld_library_path",
    "LD_LIBRARY_PATH does not shadow torch's CUDA libraries",
    cause="missing_cuda_lib",
)
def ld_library_path(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """LD_LIBRARY_PATH wins over the CUDA libraries pip wheels bring (nvidia-cublas-cu12, ...).
    A directory of another CUDA major on it makes torch load the wrong libcublas/libcudnn:
    'undefined symbol' or 'libcudart.so.11.0: cannot open shared object file' errors follow."""
    if m.env is None:
        return c.skip("environment not in this snapshot")
    path = m.env_value("LD_LIBRARY_PATH")
    build = facts.torch_cuda(m)
    if not path:
        return c.ok("LD_LIBRARY_PATH is not set")
    if build is None:
        return c.skip("torch is not a CUDA build")
    want = Version.parse(build)
    clashes = []
    for entry in path.split(":"):
        match = _CUDA_LIB_DIR.search(entry)
        if match and want is not None and int(match.group(1)) != want.major:
            clashes.append(entry)
    if clashes:
        return c.warn(
            f"LD_LIBRARY_PATH holds CUDA libraries of another major than torch's CUDA {build}",
            *clashes,
            fix="Remove those directories from LD_LIBRARY_PATH (e.g. in ~/.bashrc) before running torch.",
        )
    return c.ok("LD_LIBRARY_PATH holds no CUDA directory of another major")


@check("cuda.visible_devices", "CUDA_VISIBLE_DEVICES names existing GPUs")
def visible_devices(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """CUDA_VISIBLE_DEVICES set to an empty string, -1 or indices that do not exist hides GPUs
    from every CUDA program: torch then reports no GPU although nvidia-smi shows them."""
    if m.env is None:
        return c.skip("environment not in this snapshot")
    value = m.env_value("CUDA_VISIBLE_DEVICES")
    if value is None:
        return c.ok("CUDA_VISIBLE_DEVICES is not set (all GPUs visible)")
    count = facts.nvidia_gpu_count(m)
    entries = [e.strip() for e in value.split(",") if e.strip()]
    if not entries or entries[0] in {"-1", "none", "NoDevFiles"}:
        if count:
            return c.warn(
                f"CUDA_VISIBLE_DEVICES={value!r} hides all {count} GPU(s)",
                fix="unset CUDA_VISIBLE_DEVICES",
                cause=None,
            )
        return c.info(f"CUDA_VISIBLE_DEVICES={value!r} hides all GPUs")
    uuids = {g.uuid for g in m.gpus or () if g.uuid}
    bad = []
    for entry in entries:
        if entry.isdigit():
            if count is not None and int(entry) >= count:
                bad.append(entry)
        elif (
            entry.startswith(("GPU-", "MIG-"))
            and uuids
            and not any(u.startswith(entry) for u in uuids)
        ):
            bad.append(entry)
    if bad:
        return c.warn(
            f"CUDA_VISIBLE_DEVICES names GPU(s) that do not exist: {', '.join(bad)}",
            f"CUDA_VISIBLE_DEVICES={value}; this machine has {count} GPU(s)",
            fix="Use indices 0..N-1 or UUIDs from `nvidia-smi -L`; CUDA ignores every entry after an invalid one.",
            cause=None,
        )
    return c.ok(f"CUDA_VISIBLE_DEVICES={value}")

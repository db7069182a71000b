"""AMD GPUs on the live machine: AMD's library (amdsmi) or `rocm-smi --json`, the ROCm release
and device access.

GPUs are read through rocm-smi, the tool every ROCm release ships, whose JSON is read by the same
reader as a recorded file; where it is missing or reads no GPU, through AMD's library (the
`amdsmi` binding and its libamd_smi.so, ROCm 6.x and newer). Device access is what ROCm
needs and users most often lack: /dev/kfd (the amdgpu driver's compute interface) and the
/dev/dri/renderD* nodes, opened read-write, which the `render` and `video` groups grant.
"""

from __future__ import annotations

import grp
import os
from pathlib import Path

from dlrig.machine import amdsmi_library
from dlrig.machine.model import Gpu, ProbeIssue, Rocm, Topology
from dlrig.machine.readers import rocm_smi
from dlrig.machine.runner import ProbeContext

# telegraf's amd_rocm_smi flags that this reader uses: product, use, memory, power, clocks,
# temperature, bus, PCIe, topology, driver version (each flag is accepted since ROCm 4.3).
ROCM_SMI_ARGS = (
    "--showproductname",
    "--showuse",
    "--showmemuse",
    "--showmeminfo",
    "vram",
    "--showpower",
    "--showmaxpower",
    "--showclocks",
    "--showtemp",
    "--showbus",
    "--showuniqueid",
    "--showserial",
    "--showreplaycount",
    "--showtopotype",
    "--showdriverversion",
    "--json",
)


def _rocm_version(ctx: ProbeContext) -> str | None:
    for path in ("/opt/rocm/.info/version", "/opt/rocm/.info/version-dev"):
        text = (ctx.read(path) or "").strip()
        if text:
            # "6.1.2-119": the release, then the build number
            return text.split("-")[0]
    return None


def _access(ctx: ProbeContext, absolute: str) -> bool | None:
    path = ctx.path(absolute)
    if not path.exists():
        return None
    return os.access(path, os.R_OK | os.W_OK)


def _groups() -> tuple[str, ...] | None:
    try:
        return tuple(sorted({grp.getgrgid(gid).gr_name for gid in os.getgroups()}))
    except (KeyError, OSError):
        return None


def probe(
    ctx: ProbeContext,
) -> tuple[tuple[Gpu, ...] | None, Topology | None, Rocm | None, list[ProbeIssue]]:
    """AMD GPUs, their topology and the ROCm stack; (None, None, None, []) on a machine with
    no sign of ROCm (no /dev/kfd, no rocm-smi, no /opt/rocm)."""
    kfd = ctx.path("/dev/kfd").exists()
    tool = ctx.runner.which("rocm-smi")
    version = _rocm_version(ctx)
    if not (kfd or tool or version):
        return None, None, None, []
    issues: list[ProbeIssue] = []
    gpus = topology = None
    driver = None
    through = "rocm-smi" if tool else None
    if tool:
        result = ctx.runner.run([tool, *ROCM_SMI_ARGS], ctx.timeout_s)
        if result.ok and rocm_smi.looks_like(result.stdout):
            try:
                recorded = rocm_smi.read(result.stdout, None)
            except ValueError as exc:
                issues.append(ProbeIssue("rocm", f"rocm-smi --json: {exc}"))
            else:
                gpus, topology = recorded.gpus, recorded.topology
                driver = recorded.rocm.amdgpu_driver_version if recorded.rocm else None
        else:
            reason = result.error or (result.stderr or result.stdout).strip()[:200]
            issues.append(ProbeIssue("rocm", f"rocm-smi failed: {reason or 'no JSON'}"))
    # rocm-smi (recorded-tested, with the topology, clocks and product names) first; AMD's
    # library where rocm-smi is missing or read no GPU. Only on this machine: a replay under
    # another root has no library to ask.
    if not gpus and ctx.root == Path("/"):
        try:
            answers = amdsmi_library.read(amdsmi_library.load())
        except amdsmi_library.AmdSmiUnavailable as exc:
            if "not installed" not in str(exc):  # a binding without its library: say so
                issues.append(ProbeIssue("rocm", str(exc)))
        else:
            if answers:
                gpus = tuple(amdsmi_library.gpu_from_calls(i, a) for i, a in enumerate(answers))
                driver = next(filter(None, map(amdsmi_library.driver_version, answers)), None)
                through = "amdsmi"
    renders = sorted(ctx.path("/dev/dri").glob("renderD*")) if ctx.path("/dev/dri").is_dir() else []
    render_ok = all(os.access(node, os.R_OK | os.W_OK) for node in renders) if renders else None
    rocm = Rocm(
        version=version,
        amdgpu_driver_version=driver,
        tool=through,
        kfd_present=kfd,
        kfd_accessible=_access(ctx, "/dev/kfd"),
        render_accessible=render_ok,
        user_groups=_groups(),
    )
    return gpus, topology, rocm, issues

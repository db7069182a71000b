"""AMD GPUs on the live machine: `rocm-smi --json`, the ROCm release and device access.

rocm-smi is the one tool every ROCm release ships (amd-smi arrived in 6.x and needs its own
library); its JSON is read by the same reader as a recorded file. Device access is what ROCm
needs and users most often lack: /dev/kfd (the amdgpu driver's compute interface) and the
/dev/dri/renderD* nodes, opened read-write, which the `render` and `video` groups grant.
"""

from __future__ import annotations

import grp
import os

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
    renders = sorted(ctx.path("/dev/dri").glob("renderD*")) if ctx.path("/dev/dri").is_dir() else []
    render_ok = all(os.access(node, os.R_OK | os.W_OK) for node in renders) if renders else None
    rocm = Rocm(
        version=version,
        amdgpu_driver_version=driver,
        tool="rocm-smi" if tool else None,
        kfd_present=kfd,
        kfd_accessible=_access(ctx, "/dev/kfd"),
        render_accessible=render_ok,
        user_groups=_groups(),
    )
    return gpus, topology, rocm, issues

"""AMD ROCm checks: the ROCm twin of the CUDA chain, "torch's +rocm wheel <-> the GPU's gfx
target in the wheel's list <-> the installed ROCm <-> access to /dev/kfd and /dev/dri".

`rocm-smi --showproductname`, `rocminfo | grep gfx` and `python -c "import torch;
print(torch.version.hip, torch.cuda.get_arch_list())"` show the same facts.
"""

from __future__ import annotations

import re

from dlrig.doctor import facts, installs
from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.knowledge import rocm as rocm_knowledge
from dlrig.knowledge.versions import Version, local_variant
from dlrig.machine.model import Gpu, Machine, TorchInfo
from dlrig.report import CheckResult


def amd_gpus(m: Machine) -> tuple[Gpu, ...]:
    return tuple(g for g in m.gpus or () if g.vendor == "amd")


def _target(gpu: Gpu) -> str | None:
    return rocm_knowledge.target_of(gpu.gfx_target, gpu.name)


@check(
    "rocm.torch_build", "torch is a ROCm build on a machine with AMD GPUs", cause="cpu_only_torch"
)
def torch_build(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """AMD GPUs need a ROCm build of torch (a `+rocm6.x` wheel from the PyTorch index,
    or AMD's wheels): the default PyPI wheel is built for CUDA and sees no AMD GPU, and a
    `+cpu` wheel sees none at all."""
    gpus = amd_gpus(m)
    info = facts.torch(m)
    if not gpus:
        return c.skip("no AMD GPUs in this snapshot")
    if info is None:
        return c.skip(facts.absent(m, "torch"))
    if info.build == "rocm":
        return c.ok(f"torch {info.version} is a ROCm build (HIP {info.hip_version or '?'})")
    if info.build is None:
        return c.skip(f"torch {info.version}: its build (CUDA, ROCm or CPU) is not recorded")
    rocm_version = m.rocm.version if m.rocm else None
    return c.fail(
        f"torch {info.version} is a {info.build.upper()} build; it cannot use the "
        f"{len(gpus)} AMD GPU(s)",
        f"{facts.gpu_label(gpus[0])}" + (f" ({_target(gpus[0])})" if _target(gpus[0]) else ""),
        *([f"ROCm {rocm_version} installed"] if rocm_version else []),
        fix=installs.rocm_torch_fix(rocm_version),
    )


def _arch_list(info: TorchInfo) -> tuple[tuple[str, ...] | None, str]:
    """The gfx targets the installed torch carries and where that comes from."""
    if info.arch_list:
        targets = tuple(t for t in (rocm_knowledge.base_target(a) for a in info.arch_list) if t)
        if targets:
            return targets, "torch.cuda.get_arch_list()"
    build = rocm_knowledge.build_for(info.version, local_variant(info.version))
    if build is not None and build.targets:
        return build.targets, f"the {build.rocm_variant} wheels of torch {build.torch_version}"
    return None, ""


def _override_text(target: str) -> str:
    known = rocm_knowledge.target_info(target)
    if known is None or not known.override:
        return ""
    return (
        f"\nUnsupported by AMD, reported working for {target}: `export "
        f"HSA_OVERRIDE_GFX_VERSION={known.override}` before starting Python (it runs the code "
        f"of the nearest supported target)."
    )


@check(
    "rocm.gfx_in_build",
    "each AMD GPU's gfx target is in torch's ROCm build",
    cause="no_kernel_image",
)
def gfx_in_build(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """A ROCm wheel carries code for a fixed list of GPU ISAs (gfx targets). On a GPU outside
    it every kernel fails with "HIP error: invalid device function" or "hipErrorNoBinaryForGpu:
    Unable to find code object for all current devices". Consumer cards such as the RX 6700 XT
    (gfx1031) or RX 5700 XT (gfx1010) are in no official wheel."""
    gpus = amd_gpus(m)
    info = facts.torch(m)
    if not gpus:
        return c.skip("no AMD GPUs in this snapshot")
    if info is None or info.build != "rocm":
        return c.skip("torch is not a ROCm build (see rocm.torch_build)")
    targets = {g.index: _target(g) for g in gpus}
    known = {index: t for index, t in targets.items() if t}
    if not known:
        return c.skip("the GPUs' gfx targets are not in this snapshot (rocminfo | grep gfx)")
    override = m.env_value("HSA_OVERRIDE_GFX_VERSION")
    carried, where = _arch_list(info)
    if carried is None:
        outside = sorted({t for t in known.values() if t not in rocm_knowledge.official_targets()})
        if not outside:
            return c.info(
                f"torch {info.version}: its gfx list is not known here; "
                f"{', '.join(sorted(set(known.values())))} is in recent official wheels",
                'check: python -c "import torch; print(torch.cuda.get_arch_list())"',
            )
        where = "any official PyTorch ROCm wheel"
    else:
        outside = sorted({t for t in known.values() if t not in carried})
    if not outside:
        return c.ok(f"{', '.join(sorted(set(known.values())))} in torch {info.version} ({where})")
    missing = [g for g in gpus if targets[g.index] in outside]
    evidence = [
        *(f"{facts.gpu_label(g)}: {targets[g.index]}" for g in missing),
        f"not in {where}" + (f": {';'.join(carried)}" if carried else ""),
    ]
    if override:
        return c.info(
            f"{', '.join(outside)} is not in torch's build; HSA_OVERRIDE_GFX_VERSION="
            f"{override} is set, so ROCm runs another target's code (unsupported by AMD)",
            *evidence,
        )
    return c.fail(
        f"torch {info.version} has no code for {', '.join(outside)}: every GPU kernel will fail",
        *evidence,
        fix=(
            f"Use a build that carries {', '.join(outside)}: build torch from source with "
            f"PYTORCH_ROCM_ARCH={';'.join(outside)}, or a community wheel for it."
            + "".join(_override_text(t) for t in outside)
        ),
    )


@check(
    "rocm.device_access", "this user can open /dev/kfd and /dev/dri", cause="gpu_device_permission"
)
def device_access(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """ROCm opens /dev/kfd (the amdgpu driver's compute interface) and the /dev/dri/renderD*
    nodes read-write. Without the `render` group (and on older distributions `video`) torch
    sees no GPU; in a container both devices must be passed in."""
    r = m.rocm
    if r is None or r.kfd_present is None:
        return c.skip("device access not in this snapshot")
    if not amd_gpus(m) and not r.kfd_present:
        # ROCm user space on a machine with no AMD GPU (an NVIDIA box with /opt/rocm) is no fault.
        return c.skip("no AMD GPU and no /dev/kfd: ROCm's user space alone")
    if r.kfd_present is False:
        return c.fail(
            "no /dev/kfd: the amdgpu kernel driver's compute interface is missing",
            fix="Install and load the amdgpu driver (`sudo apt install amdgpu-dkms`, then "
            "reboot); in a container pass `--device=/dev/kfd --device=/dev/dri`.",
            cause="no_amdgpu_driver",
        )
    denied = [
        name
        for name, ok in (("/dev/kfd", r.kfd_accessible), ("/dev/dri/renderD*", r.render_accessible))
        if ok is False
    ]
    if denied:
        groups = ", ".join(r.user_groups) if r.user_groups else "unknown"
        return c.fail(
            f"this user cannot open {' and '.join(denied)} read-write",
            f"groups: {groups}",
            fix="sudo usermod -aG render,video $USER   # then log out and in again; in a "
            "container add --group-add video --group-add render",
        )
    return c.ok("/dev/kfd and the render nodes are readable and writable")


@check("rocm.stack_versions", "torch's ROCm matches the installed ROCm")
def stack_versions(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """A torch ROCm wheel brings its own ROCm libraries but runs on the installed amdgpu kernel
    driver, which AMD supports with user space of nearby releases only; a wheel of another
    ROCm major version (5.x on 6.x, 6.x on 7.x) fails at its first kernel."""
    info = facts.torch(m)
    installed = m.rocm.version if m.rocm else None
    if info is None or info.build != "rocm" or not installed:
        return c.skip("torch's ROCm or the installed ROCm not in this snapshot")
    variant = local_variant(info.version) or ""
    # Only a "+rocm6.2" tag names ROCm; source builds carry a git hash ("1.7.0a0+9ddd3df").
    tagged = Version.parse(variant.removeprefix("rocm")) if re.match(r"rocm\d", variant) else None
    built = tagged or Version.parse(info.hip_version)
    have = Version.parse(installed)
    if built is None or have is None:
        return c.skip("ROCm versions not readable")
    if built.major == have.major:
        return c.ok(f"torch for ROCm {built} on ROCm {have}")
    return c.warn(
        f"torch {info.version} is built for ROCm {built}; ROCm {have} is installed",
        fix=installs.rocm_torch_fix(installed),
        cause=None,
    )

"""GPU checks, architecture: does the installed PyTorch carry kernels for each GPU?"""

from __future__ import annotations

from dlrig.doctor import facts, installs
from dlrig.doctor.gpu_evidence import gpu_check
from dlrig.doctor.registry import Check, DoctorOptions
from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge import pytorch as torch_knowledge
from dlrig.knowledge.versions import Version, local_variant, minor_of
from dlrig.machine.model import Gpu, Machine
from dlrig.report import CheckResult


def _arch_tokens(arch_list: tuple[str, ...]) -> tuple[set[Version], set[Version]]:
    """(cubin capabilities, PTX capabilities) from torch's "sm_86 compute_90" list."""
    cubins: set[Version] = set()
    ptx: set[Version] = set()
    for token in arch_list:
        kind, _, digits = token.partition("_")
        digits = digits.rstrip("af")
        if not digits.isdigit() or len(digits) < 2:
            continue
        version = Version((int(digits[:-1]), int(digits[-1])))
        (cubins if kind == "sm" else ptx).add(version)
    return cubins, ptx


def _runs_on(arch_list: tuple[str, ...], capability: str, build_cuda: str | None) -> bool:
    """Cubins of the same major and an equal or lower minor run; PTX of a lower version is
    JIT-compiled, but only if the build's CUDA already knows the GPU's architecture."""
    wanted = Version.parse(capability)
    if wanted is None:
        return True
    cubins, ptx = _arch_tokens(arch_list)
    if any(c.major == wanted.major and c.minor <= wanted.minor for c in cubins):
        return True
    if not any(p <= wanted for p in ptx):
        return False
    needed = cuda_knowledge.first_cuda_for(f"{wanted.major}.{wanted.minor}")
    built = Version.parse(build_cuda) if build_cuda else None
    return needed is None or built is None or built.truncated(2) >= needed


def _installed_arch_list(m: Machine) -> tuple[tuple[str, ...] | None, str]:
    """torch's architecture list and where it comes from (the build itself, or the table)."""
    info = facts.torch(m)
    if info is None:
        return None, ""
    if info.arch_list:
        return info.arch_list, "the installed build (torch.cuda.get_arch_list())"
    build_cuda = facts.torch_cuda(m)
    if build_cuda is None:
        return None, ""
    variant = local_variant(info.version)
    if not (variant and variant.startswith("cu")):
        variant = torch_knowledge.variant_for_cuda(info.version, build_cuda)
    if variant is None:
        return None, ""
    entry = torch_knowledge.arch_list(info.version, variant)
    if entry is None:
        return None, ""
    tokens = tuple(f"sm_{c.replace('.', '')}" for c in entry.compute_capabilities)
    if entry.ptx:
        tokens += (f"compute_{entry.ptx.replace('.', '')}",)
    return (
        tokens,
        f"the published list for torch {minor_of(info.version)} {variant} ({entry.confidence} confidence)",
    )


def _suggest_build(m: Machine, o: DoctorOptions) -> str:
    """A build with kernels for every GPU that runs on this driver: the resolver's answer."""
    return installs.gpu_build_fix(m, o.today)


@gpu_check(
    "gpu.arch_in_torch",
    "each GPU's architecture is in torch's build",
    nvidia_only=True,
    cause="no_kernel_image",
)
def arch_in_torch(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """PyTorch wheels carry GPU machine code for a list of compute capabilities
    (`torch.cuda.get_arch_list()`). A GPU runs the code of its own major version with an equal or
    lower minor (8.0 code runs on 8.6), or PTX of a lower version after JIT compilation. Anything
    else fails with 'no kernel image is available for execution on the device'. RTX 50xx
    (sm_120) needs cu128 or newer wheels; Maxwell, Pascal and Volta were dropped from cu128+
    wheels of recent releases."""
    info = facts.torch(m)
    if info is None or facts.torch_cuda(m) is None:
        return c.skip("torch is not a CUDA build")
    arch_list, origin = _installed_arch_list(m)
    if arch_list is None:
        return _older_than_any_build(c, gpus, info.version)
    missing = []
    unknown = []
    for gpu in gpus:
        capability, _ = facts.capability(gpu)
        if capability is None:
            unknown.append(gpu)
        elif not _runs_on(arch_list, capability, facts.torch_cuda(m)):
            missing.append((gpu, capability))
    evidence = [f"torch {info.version} ships: {' '.join(arch_list)} (from {origin})"]
    if missing:
        gpu, capability = missing[0]
        return c.fail(
            f"{facts.gpu_label(gpu)} is {facts.sm(capability)}, which torch {info.version} has no kernels for",
            *evidence,
            *(f"{facts.gpu_label(g)}: compute capability {cap}" for g, cap in missing),
            'check: python -c "import torch; print(torch.cuda.get_arch_list())"',
            fix=_suggest_build(m, o),
        )
    if unknown and len(unknown) == len(gpus):
        return c.skip("compute capability of the GPUs unknown", *evidence)
    return c.ok(f"torch {info.version} has kernels for every GPU's architecture", *evidence)


def _older_than_any_build(c: Check, gpus: tuple[Gpu, ...], torch_version: str) -> CheckResult:
    """Without the build's own list: a GPU older than every published PyTorch build still fails."""
    oldest = min(
        (
            Version.parse(cap)
            for e in torch_knowledge.arch_lists()
            for cap in e.compute_capabilities
        ),
        default=None,
        key=lambda v: v or Version((99,)),
    )
    for gpu in gpus:
        capability, source = facts.capability(gpu)
        version = Version.parse(capability) if capability else None
        if version is not None and oldest is not None and version < oldest:
            return c.fail(
                f"{facts.gpu_label(gpu)} (compute capability {capability}) is older than any "
                f"architecture PyTorch builds ship (oldest: {oldest})",
                f"torch {torch_version}; compute capability from {source}",
                fix="This GPU cannot run PyTorch's CUDA builds: use the CPU build, build PyTorch from "
                "source for this architecture (if its CUDA still supports it), or use a newer GPU.",
            )
    return c.skip(f"torch {torch_version}: architecture list unknown")


@gpu_check(
    "gpu.torch_too_old",
    "PyTorch release supports the GPU architecture",
    "no_kernel_image",
    nvidia_only=True,
)
def torch_too_old(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """New GPU architectures need a PyTorch release that knows them: Blackwell GeForce (sm_120)
    first shipped in 2.7 (cu128 wheels), Hopper (sm_90) in 2.0 (cu118). No wheel variant of an
    older release can run there, so the fix is to upgrade torch, not to reinstall."""
    info = facts.torch(m)
    if info is None:
        return c.skip(facts.absent(m, "torch"))
    release = Version.parse(minor_of(info.version))
    if release is None:
        return c.skip(f"cannot read torch version {info.version!r}")
    known_releases = {Version.parse(e.torch_version) for e in torch_knowledge.arch_lists()}
    if release not in known_releases:
        return c.skip(f"torch {minor_of(info.version)} is not in the release table")
    too_old = []
    for gpu in gpus:
        capability, _ = facts.capability(gpu)
        if capability is None:
            continue
        supporting = torch_knowledge.variants_supporting(capability)
        releases = sorted(
            v for v in {Version.parse(e.torch_version) for e in supporting} if v is not None
        )
        if releases and release < releases[0]:
            too_old.append((gpu, capability, str(releases[0])))
    if too_old:
        gpu, capability, first = too_old[0]
        return c.fail(
            f"torch {info.version} predates {facts.gpu_label(gpu)} ({facts.sm(capability)}): first "
            f"supported in torch {first}",
            *(f"{facts.gpu_label(g)}: {facts.sm(cap)} needs torch ≥ {f}" for g, cap, f in too_old),
            fix=_suggest_build(m, o),
        )
    return c.ok(f"torch {minor_of(info.version)} has a build for every GPU's architecture")

"""Every install command doctor prints, from the one resolver (`dlrig.knowledge.resolver`).

A check says what is wrong; this module turns the snapshot into a resolver request (the GPUs'
compute capabilities, the driver, the platform, the torch the user has) so the fix names a
wheel, an index and a driver that exist together. No check builds a pip line itself.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from dlrig.doctor import facts
from dlrig.knowledge import architectures as arch_knowledge
from dlrig.knowledge import drivers as driver_knowledge
from dlrig.knowledge import rocm as rocm_knowledge
from dlrig.knowledge.driver_choice import (
    DriverLimit,
    branch_floor,
    branch_for,
    driver_limit_for,
    driver_upgrade_for,
    recommended_branch_driver,
)
from dlrig.knowledge.resolver import Request, Resolution, resolve
from dlrig.knowledge.versions import Version, local_variant, release
from dlrig.machine.model import Machine


def platform_of(m: Machine) -> str:
    """linux-x86_64 | linux-aarch64 | windows-x86_64 | macos-arm64 | macos-x86_64."""
    name = (m.os.name or "").lower() if m.os else ""
    arch = (m.os.architecture or "").lower() if m.os else ""
    if "windows" in name:
        return "windows-x86_64"
    if "mac" in name or "darwin" in name:
        return "macos-x86_64" if arch in {"x86_64", "amd64"} else "macos-arm64"
    return "linux-aarch64" if arch in {"aarch64", "arm64"} else "linux-x86_64"


def capabilities_of(m: Machine) -> tuple[str, ...]:
    found = []
    for gpu in m.gpus or ():
        capability, _ = facts.capability(gpu)
        if capability:
            found.append(capability)
    return tuple(sorted(set(found)))


def request_for(
    m: Machine,
    *,
    keep_torch: bool = True,
    exact: bool = False,
    variant: str | None = None,
    keep_driver: bool = True,
    torch_version: str | None = None,
    today: dt.date | None = None,
    need_cuda: bool = False,
) -> Request:
    """The resolver request this snapshot asks: its GPUs, driver, platform and torch."""
    info = facts.torch(m)
    wanted = torch_version or (release(info.version) if info and keep_torch else None)
    driver = m.driver
    frameworks = m.frameworks
    return Request(
        compute_capabilities=capabilities_of(m),
        driver_version=driver.version if driver and driver.version else None,
        driver_cuda=driver.cuda_version if driver and not driver.version else None,
        platform=platform_of(m),
        torch_version=wanted,
        torch_exact=exact,
        cuda_variant=variant,
        keep_driver=keep_driver,
        torchvision=frameworks is None or frameworks.torchvision is not None or info is None,
        torchaudio=frameworks is None or frameworks.torchaudio is not None or info is None,
        today=today,
        need_cuda=need_cuda,
        windows_driver=facts.driver_on_windows(m) and not platform_of(m).startswith("windows"),
        os_name=m.os.name if m.os and m.os.name else None,
        gpu_names=tuple(dict.fromkeys(g.name for g in m.gpus or ())),
    )


def installed_variant(m: Machine) -> str | None:
    """The wheel variant of the installed torch ("cu121", "cpu"), from its version or its CUDA."""
    info = facts.torch(m)
    if info is None:
        return None
    variant = local_variant(info.version)
    if variant and (variant == "cpu" or (variant.startswith("cu") and variant[2:].isdigit())):
        return variant
    build = facts.torch_cuda(m)
    parsed = Version.parse(build) if build else None
    return f"cu{parsed.major}{parsed.minor}" if parsed else None


def reinstall_fix(answer: Resolution) -> str:
    """The fix text of a resolution, with what the tables say cannot exist."""
    text = answer.fix_text()
    if answer.install is not None and answer.problems:
        text += "\n(" + "; ".join(answer.problems) + ")"
    return text


def gpu_build_fix(m: Machine, today: dt.date | None = None) -> str:
    """A torch build with kernels for every GPU here, that runs on this driver if one does."""
    return reinstall_fix(resolve(request_for(m, today=today)))


def driver_install_text(m: Machine, minimum: Version | None, today: dt.date) -> str:
    """How to install a driver of at least `minimum` (None: the current long-term branch, or
    the GPUs' last branch when their support ended before it), never past what the GPUs take."""
    windows = facts.driver_on_windows(m)
    wsl = windows and not platform_of(m).startswith("windows")
    request = request_for(m, today=today)
    limit = arch_knowledge.driver_limit(capabilities_of(m))
    cap = limit.last_branch if limit else None
    target = minimum or recommended_branch_driver(today, windows, cap)
    if target is None:
        # NVIDIA's table gives no Windows minimum for the newest branch: no number to name.
        where = " on the Windows host (WSL2 runs on its driver)" if wsl else ""
        return (
            f"Install the current NVIDIA driver for your GPU{where} from "
            "https://www.nvidia.com/Download/index.aspx, then reboot"
        )
    beyond = driver_limit_for(target, request, windows)
    if beyond is not None:
        return beyond.text() + "; " + keep_driver_text(m, today)
    upgrade = driver_upgrade_for(target, request, windows)
    return upgrade.text() if upgrade else "install the NVIDIA driver for your GPU"


def keep_driver_text(m: Machine, today: dt.date | None = None) -> str:
    """For a GPU no newer driver supports: the build its driver runs (the resolver's), or the
    CPU build when no wheel has kernels for it; or a newer GPU."""
    answer = resolve(request_for(m, today=today))
    if answer.ok and answer.install is not None:
        use = f"keep the driver and use torch {answer.install.torch_minor} ({answer.install.cuda_variant}): "
        return use + answer.install.pip_command(force_reinstall=True) + "; or replace the GPU"
    cpu = resolve(
        dataclasses.replace(
            request_for(m, today=today, variant="cpu"),
            compute_capabilities=(),
            driver_version=None,
            driver_cuda=None,
        )
    )
    command = cpu.install.pip_command(force_reinstall=True) if cpu.install else "the CPU build"
    return (
        "no PyTorch wheel runs on this GPU with its driver: replace the GPU, or keep the driver "
        f"and run on the CPU: {command}"
    )


def newer_branch_text(m: Machine, current_major: int, today: dt.date) -> str:
    """How to leave an unsupported branch: the supported branch at or above it that the GPUs
    take, or, when their last branch is this one, what to do without a newer driver."""
    windows = facts.driver_on_windows(m)
    limit = arch_knowledge.driver_limit(capabilities_of(m))
    cap = limit.last_branch if limit else None
    branch = branch_for(Version((current_major,)), today, cap)
    if limit is not None and cap is not None and (branch is None or branch.major <= current_major):
        last = driver_knowledge.branches().get(f"R{cap}")
        ended = f", end of life {last.end_of_life:%Y-%m}" if last and last.end_of_life else ""
        names = tuple(dict.fromkeys(g.name for g in m.gpus or ()))
        text = DriverLimit(None, limit.label, f"R{cap}{ended}", names).text()
        return text + ": " + keep_driver_text(m, today)
    if branch is None:
        return driver_install_text(m, None, today)
    return driver_install_text(m, branch_floor(branch, windows), today)


def beyond_last_branch(m: Machine, minimum: Version | None) -> bool:
    """The GPUs cannot take a driver of at least `minimum` (their architecture's support ended)."""
    windows = facts.driver_on_windows(m)
    return driver_limit_for(minimum, request_for(m), windows) is not None


def rocm_torch_fix(rocm_version: str | None) -> str:
    """The torch ROCm wheel to install: the newest release built for the installed ROCm's
    major version when it is known, else the newest ROCm build (pytorch_rocm_builds.csv)."""
    build = rocm_knowledge.newest_build(rocm_version)
    return (
        f"pip install --force-reinstall 'torch=={build.torch_version}.*' "
        f"--index-url https://download.pytorch.org/whl/{build.rocm_variant}"
    )

"""Every install command diagnose prints comes from here, and here only from the resolver.

A fix that names a torch wheel, a wheel index or a driver must name ones that exist together
(`dlrig.knowledge.resolver`, built from the knowledge tables). This module turns what the log
and the machine snapshot say (the driver's CUDA level, the GPU's compute capability, the torch
that is installed) into a resolver request and the answer into fix text.
"""

from __future__ import annotations

import functools
from typing import Any

from dlrig.knowledge import cuda, pytorch, versions
from dlrig.knowledge import gpus as gpu_knowledge
from dlrig.knowledge.resolver import Request, Resolution, resolve
from dlrig.knowledge.versions import local_variant
from dlrig.machine.model import Machine


def _capabilities(machine: Machine | None, capability: str | None = None) -> tuple[str, ...]:
    if capability:
        return (capability,)
    if machine is None:
        return ()
    found: list[str] = []
    for gpu in machine.gpus or ():
        value = gpu.compute_capability
        if value is None:
            value = gpu_knowledge.compute_capability(gpu.name)[0]
        if value and value not in found:
            found.append(value)
    return tuple(found)


def _context(machine: Machine | None) -> dict[str, Any]:
    """The OS and GPU names a driver fix's package depends on (Ubuntu's, NVIDIA's repository's)."""
    if machine is None:
        return {}
    return {
        "os_name": machine.os.name if machine.os and machine.os.name else None,
        "gpu_names": tuple(dict.fromkeys(g.name for g in machine.gpus or ())),
    }


def _driver(machine: Machine | None) -> str | None:
    return machine.driver.version if machine and machine.driver else None


def _torch(machine: Machine | None) -> tuple[str | None, str | None]:
    """(installed torch version, its CUDA variant) from the snapshot."""
    torch = machine.frameworks.torch if machine and machine.frameworks else None
    if torch is None:
        return None, None
    variant = local_variant(torch.version)
    if variant is None and torch.cuda_version:
        variant = "cu" + torch.cuda_version.replace(".", "")[:3]
    return torch.version, variant


def request(
    machine: Machine | None,
    *,
    driver_cuda: str | None = None,
    capability: str | None = None,
    torch_version: str | None = None,
    torch_exact: bool = False,
    cuda_variant: str | None = None,
) -> Request:
    """A resolver request from the log's own facts, completed with the machine's."""
    installed, _ = _torch(machine)
    return Request(
        compute_capabilities=_capabilities(machine, capability),
        driver_version=_driver(machine),
        driver_cuda=None if _driver(machine) else driver_cuda,
        torch_version=torch_version or installed,
        torch_exact=torch_exact,
        cuda_variant=cuda_variant,
        **_context(machine),
    )


def answer(req: Request) -> Resolution:
    return resolve(req)


def for_driver(
    machine: Machine | None,
    driver_cuda: str | None,
    logged: tuple[str | None, str | None] = (None, None),
) -> dict[str, str]:
    """driver_too_old: the driver the installed build needs, and the build this driver runs.

    `logged` is the torch release and CUDA variant the log itself shows ("2.1.0+cu121"), used
    where the machine snapshot does not say."""
    out: dict[str, str] = {}
    installed, variant = _torch(machine)
    if installed is None and logged[0] and logged[1]:
        installed, variant = logged
    driver = _driver(machine)
    if installed and variant and variant != "cpu":
        needed = resolve(
            request(machine, driver_cuda=driver_cuda, torch_exact=True, cuda_variant=variant)
        )
        if needed.driver_upgrade is not None:
            shown = f" (installed: {driver})" if driver else ""
            out["driver_advice"] = (
                f"torch {installed} is built for {variant}: {needed.driver_upgrade.text()}{shown}"
            )
    if driver or driver_cuda:
        runs = resolve(request(machine, driver_cuda=driver_cuda))
        if runs.install is not None and runs.driver_upgrade is None:
            level = f"driver {driver}" if driver else f"a driver for CUDA {driver_cuda}"
            out["driver_variant_advice"] = (
                f"Or keep the driver and install a build that runs on {level}: "
                f"{runs.install.pip_command(force_reinstall=True)}"
            )
            if "driver_advice" not in out:
                out["driver_advice"] = _upgrade_text(machine, driver, driver_cuda)
        elif runs.driver_upgrade is not None:
            out.setdefault("driver_advice", runs.driver_upgrade.text())
    if "driver_advice" not in out:
        out["driver_advice"] = _upgrade_text(machine, driver, driver_cuda)
    return out


def _floors_text(driver_cuda: str | None) -> str | None:
    """The driver floor of each CUDA major above the driver's: what a build of that major needs
    (minor-version compatibility), when the log does not say which build is installed."""
    have = int(driver_cuda.split(".")[0]) if driver_cuda else 0
    floors = [
        f"CUDA {major}.x builds need ≥ {row.min_driver_linux}"
        for major, row in sorted(cuda.minor_compat().items())
        if major > have
    ]
    if not floors:
        return None
    return "; ".join(floors)


def _upgrade_text(machine: Machine | None, driver: str | None, driver_cuda: str | None) -> str:
    """The driver upgrade for the build that is installed; where neither the log nor the
    machine says which build that is, the floor of each CUDA major (never the newest torch's
    driver: the user's build may need far less)."""
    if _torch(machine)[0] is None:
        floors = _floors_text(driver_cuda)
        level = (
            f"supports CUDA {driver_cuda} only" if driver_cuda else "is older than the CUDA runtime"
        )
        if floors:
            return (
                f"The driver {level}. Upgrade it to the floor of the CUDA your framework was built "
                f'for ({floors}); see which: python -c "import torch; print(torch.version.cuda)"'
                " (rerun with --machine snapshot.json for the exact driver package)."
            )
    newest = resolve(
        Request(
            compute_capabilities=_capabilities(machine),
            driver_version=driver,
            driver_cuda=None if driver else driver_cuda,
            keep_driver=False,
            **_context(machine),
        )
    )
    level = f"supports CUDA {driver_cuda} only" if driver_cuda else "is older than the CUDA runtime"
    if newest.driver_upgrade is not None:
        return f"The driver {level}. {newest.driver_upgrade.text()}"
    return (
        f"The driver {level}: upgrade it to the minimum of the CUDA the framework was built with "
        "(pass --machine snapshot.json for the exact version)."
    )


def for_arch(machine: Machine | None, capability: str) -> str:
    """no_kernel_image: a build whose wheels carry kernels for this compute capability."""
    found = resolve(request(machine, capability=capability))
    if found.install is None:
        why = "; ".join(found.problems) or "no published wheel carries it"
        return (
            f"No published PyTorch wheel fits compute capability {capability} here ({why}): build "
            f'from source with TORCH_CUDA_ARCH_LIST="{capability}".'
        )
    return (
        f"Install a build with kernels for compute capability {capability}: "
        + found.fix_text()
        + _release_span(capability)
    )


def _release_span(capability: str) -> str:
    """Which releases carry this GPU's kernels, for a user whose other packages pin torch: the
    first release for a new GPU, the last for one that newer wheels dropped."""
    supported = pytorch.variants_supporting(capability)
    if not supported:
        return ""
    newest, oldest = supported[0], supported[-1]
    first_known = min(
        (entry.torch_version for entry in pytorch.arch_lists()),
        key=functools.cmp_to_key(versions.compare),
    )
    if newest.torch_version != pytorch.releases()[-1]:
        return (
            f"\n(torch {newest.torch_version} is the last release whose wheels carry kernels "
            f"for it ({newest.cuda_variant}); a newer one will not run on this GPU.)"
        )
    if oldest.torch_version == first_known:
        return ""  # every release carries it: the wheel's CUDA variant is what matters here
    return (
        f"\n(torch {oldest.torch_version} with {oldest.cuda_variant} is the first release "
        "whose wheels carry kernels for it: where another package pins an older torch, "
        "that package has to move too.)"
    )


def for_companions(machine: Machine | None, torch_cuda: str | None) -> str:
    """version_mismatch_torch_torchvision: the companions of the installed torch, one index."""
    installed, variant = _torch(machine)
    if installed:
        found = _exact(machine, installed, variant)
        if found.install is not None:
            return (
                f"Reinstall the companions built for torch {installed}: "
                f"{found.install.pip_command(force_reinstall=True)}"
            )
    if torch_cuda:
        variant = "cu" + torch_cuda.replace(".", "")
        found = resolve(Request(cuda_variant=variant))
        if found.install is not None:
            return (
                f"torch is built for CUDA {torch_cuda}: keep your torch release and install the "
                "torchvision of that release from the same index, or install the set together: "
                f"{found.install.pip_command(force_reinstall=True)}"
            )
    return (
        "Install torch, torchvision and torchaudio together, from one index and for one release: "
        "pip show torch torchvision torchaudio shows what you have; rerun with --machine "
        "snapshot.json (dlrig doctor --save snapshot.json) for the exact command."
    )


def _exact(machine: Machine | None, version: str, variant: str | None) -> Resolution:
    """That torch release and CUDA variant exactly, with its companions, for this machine."""
    return resolve(
        Request(
            compute_capabilities=_capabilities(machine),
            torch_version=version,
            torch_exact=True,
            cuda_variant=variant,
        )
    )


def for_build(machine: Machine | None, version: str, variant: str) -> str | None:
    """The torch build an extension was compiled for ("PyTorch 2.1.2+cu121"), from one index."""
    found = _exact(machine, version, variant)
    if found.install is None or found.install.cuda_variant != variant:
        return None
    return (
        f"Install the build it was compiled for, torch {version} with {variant}: pip uninstall -y "
        f"torch torchvision torchaudio && {found.install.pip_command()}"
    )


def for_cpu_only(machine: Machine | None) -> str:
    """cpu_only_torch: a CUDA build the machine's driver runs."""
    installed, _ = _torch(machine)
    driver = _driver(machine)
    if driver:
        found = resolve(request(machine))
        if found.install is not None and found.install.cuda_variant != "cpu":
            return (
                "Replace the CPU-only build with a CUDA build this driver runs: pip uninstall -y "
                f"torch torchvision torchaudio && {found.install.pip_command()}"
            )
    # No driver known: name the build for the oldest CUDA 12 driver level (what minor-version
    # compatibility lets run on any CUDA 12 driver) and say how to get the exact one.
    example = resolve(Request(driver_cuda="12.0", torch_version=installed))
    command = example.install.pip_command() if example.install else None
    text = (
        "Replace the CPU-only build with a CUDA build: check the driver's CUDA level with "
        "nvidia-smi ('CUDA Version')"
    )
    if command and example.install and example.install.cuda_variant != "cpu":
        text += (
            f"; for a CUDA 12 driver: pip uninstall -y torch torchvision torchaudio && {command}"
        )
    return text + " (rerun with --machine snapshot.json for the command that fits this machine)."

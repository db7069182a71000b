"""`dlrig provision host`: the install script for one OS release.

Every NVIDIA package the script names comes from provision_nvidia_packages.csv (what NVIDIA's
repository holds for that release); the driver branch and kernel-module flavour from
`stack.driver_choice`. The script is idempotent (each step checks its result first), has
`--dry-run` and `--root DIR`, stops for a reboot after a driver install, and verifies at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlrig.errors import InputError
from dlrig.knowledge.provision import RepoPackage, repo_package, repo_packages, toolkit_minors
from dlrig.provision.model import Bundle, Decision, Facts, GeneratedFile
from dlrig.provision.render import header, render
from dlrig.provision.stack import check_toolkit, driver_choice, torch_choice

_DISTRO_PACKAGES = {
    # What the script itself calls: curl (downloads), gpg (the container toolkit key), CA roots.
    "apt": ("ca-certificates", "curl", "gnupg"),
    "dnf": ("ca-certificates", "curl", "dnf-plugins-core"),
}
# The kernel's own headers, for DKMS to build the driver's modules against the running kernel.
_HEADERS = {
    "apt": ("linux-headers-$(uname -r)",),
    "dnf": ("kernel-devel-$(uname -r)", "kernel-headers-$(uname -r)"),
}
_OS_GLOB = {
    "ubuntu-22.04": "ubuntu-22.04",
    "ubuntu-24.04": "ubuntu-24.04",
    "debian-12": "debian-12",
    "rocky-9": "rocky-9*|rhel-9*|almalinux-9*",
}
# The Container Toolkit's own check ("Running a Sample Workload with Docker": `docker run --rm
# --runtime=nvidia --gpus all ubuntu nvidia-smi`): nvidia-smi comes from the host driver, so a
# plain OS image tests the runtime without a CUDA floor of its own.
_SMOKE_IMAGES = {
    "ubuntu-22.04": "ubuntu:22.04",
    "ubuntu-24.04": "ubuntu:24.04",
    "debian-12": "debian:12",
    "rocky-9": "rockylinux/rockylinux:9",
}
_SMOKE_SOURCE = (
    "https://docs.nvidia.com/datacenter/cloud-native/container-toolkit/latest/sample-workload.html "
    "('sudo docker run --rm --runtime=nvidia --gpus all ubuntu nvidia-smi'; secondary: not re-read here)"
)


@dataclass(frozen=True)
class HostOptions:
    cudnn: bool = False
    nccl: bool = False
    container_toolkit: bool = True


def _need(found: RepoPackage | None, what: str, os_id: str, fix: str) -> RepoPackage:
    if found is None:
        raise InputError(
            f"NVIDIA's {os_id} repository (as dlrig's table records it) has no {what}", fix=fix
        )
    return found


def _pinned(package: RepoPackage, family: str) -> str:
    """An exact build where the table has one (cuDNN 8 and NCCL are built per CUDA release)."""
    if not package.version:
        return package.package
    return (
        f"{package.package}={package.version}"
        if family == "apt"
        else f"{package.package}-{package.version}"
    )


def _stream(os_id: str, branch: str, modules: str) -> RepoPackage | None:
    flavour = "-open" if modules == "open" else "-dkms"
    for package in repo_packages():
        if (
            package.os_release == os_id
            and package.component == "driver_stream"
            and package.branch == branch
            and package.package.endswith(flavour)
        ):
            return package
    return None


def _check_gpu_present(facts: Facts) -> None:
    """A machine whose facts show no NVIDIA GPU gets no driver install unless --gpu says which."""
    machine = facts.machine
    if machine is None or "gpu" in facts.stated:
        return
    pci = machine.driver.nvidia_pci_devices if machine.driver else None
    if machine.gpus:
        return
    if pci == 0:
        raise InputError(
            f"provision host: {facts.origin} has no NVIDIA GPU (nvidia-smi lists none and the "
            "PCI bus has no NVIDIA display or 3D controller): no driver to install",
            fix="run it on the GPU machine, or give --gpu MODEL to write the script for another one",
        )
    if pci:
        raise InputError(
            f"provision host: {facts.origin} has {pci} NVIDIA PCI device(s) but no driver to name "
            "the model, and the kernel modules depend on its architecture",
            fix="give the model with --gpu MODEL (e.g. --gpu a100-sxm4-80gb)",
        )


def generate(facts: Facts, options: HostOptions | None = None) -> Bundle:
    options = options or HostOptions()
    if facts.os is None:
        raise InputError(
            "provision host: the OS release is not known",
            fix="give --os ubuntu-22.04|ubuntu-24.04|debian-12|rocky-9, or --machine SNAPSHOT",
        )
    _check_gpu_present(facts)
    os_release = facts.os
    decisions: list[Decision] = [
        Decision("OS release", os_release.id, f"from {facts.origin}", os_release.source)
    ]
    needs_driver: tuple[str, ...] = ()
    if facts.torch:
        # The script installs no torch; the wheel the machine will run only sets a driver floor.
        choice = torch_choice(facts)
        if choice.min_driver:
            needs_driver = (choice.min_driver,)
            decisions.append(
                Decision(
                    f"driver for torch {choice.torch_minor} {choice.cuda_variant}",
                    f">= {choice.min_driver}",
                    f"the wheel's CUDA {choice.cuda_version} needs it (resolver); the torch "
                    "wheels themselves come from `dlrig provision env`",
                )
            )
    cuda = facts.cuda
    toolkit = None
    if cuda:
        minor = ".".join(cuda.split(".")[:2])
        offered = toolkit_minors(os_release.id)
        toolkit = repo_package(os_release.id, "cuda_toolkit", cuda=minor)
        if toolkit is None:
            raise InputError(
                f"--cuda {cuda}: NVIDIA's {os_release.cuda_repo} repository has no CUDA {minor} toolkit "
                "(per dlrig's table of what it holds)",
                fix="choose one of "
                + ", ".join(offered)
                + " for "
                + os_release.id
                + ", or another --os",
            )
        targets = check_toolkit(minor, facts, offered, os_release.id)
        cuda = minor
        decisions.append(
            Decision(
                "CUDA toolkit",
                f"{toolkit.package} ({toolkit.version})",
                f"CUDA {minor} for {os_release.id}",
                toolkit.source,
            )
        )
        if targets is not None:
            decisions.append(targets)
    driver = driver_choice(facts, needs_cuda=(cuda,) if cuda else (), needs_driver=needs_driver)
    decisions.extend(driver.decisions)
    component = "driver_open" if driver.kernel_modules == "open" else "driver_proprietary"
    fix = "report it: dlrig's package table lacks this release's driver packages"
    driver_package = _need(
        repo_package(os_release.id, component), f"{component} package", os_release.id, fix
    )
    values: dict[str, object] = {
        "header": header(facts, "host"),
        "os": os_release,
        "driver": driver,
        "cuda": cuda,
        "toolkit": toolkit,
        "driver_package": driver_package,
        "persistenced": _need(
            repo_package(os_release.id, "persistenced"), "nvidia-persistenced", os_release.id, fix
        ),
        "distro_packages": _DISTRO_PACKAGES[os_release.family],
        "headers_packages": _HEADERS[os_release.family],
        "os_glob": _OS_GLOB.get(os_release.id, os_release.id),
        "cudnn": None,
        "cudnn_install": (),
        "nccl": None,
        "nccl_install": (),
        "container_toolkit": None,
        "smoke_image": _SMOKE_IMAGES.get(os_release.id, "ubuntu:24.04"),
    }
    if os_release.family == "apt":
        values["keyring"] = _need(
            repo_package(os_release.id, "keyring"), "cuda-keyring", os_release.id, fix
        )
        values["pin"] = _need(
            repo_package(os_release.id, "driver_pin", branch=driver.branch),
            f"pinning package for branch {driver.branch}",
            os_release.id,
            "choose another --torch/--cuda so another branch fits",
        )
    else:
        values["stream"] = _need(
            _stream(os_release.id, driver.branch, driver.kernel_modules),
            f"dnf module stream for branch {driver.branch} ({driver.kernel_modules} modules)",
            os_release.id,
            fix,
        )
        epel = _need(repo_package(os_release.id, "epel_release"), "EPEL", os_release.id, fix)
        crb = _need(repo_package(os_release.id, "crb_repo"), "CRB", os_release.id, fix)
        values["epel"], values["crb"] = epel, crb
        values["epel_rhel"] = _need(
            repo_package(os_release.id, "epel_release_rhel"), "EPEL for RHEL", os_release.id, fix
        )
        values["crb_rhel"] = _need(
            repo_package(os_release.id, "crb_repo_rhel"), "CRB for RHEL", os_release.id, fix
        )
        decisions.append(
            Decision(
                "EPEL and CRB",
                f"{crb.package} enabled, then {epel.package}",
                "the driver packages depend on dkms, which only EPEL has; EPEL needs CodeReady "
                "Builder (crb on Rocky/Alma, codeready-builder-for-rhel-9 on RHEL)",
                epel.source,
            )
        )
    if options.cudnn:
        if not cuda:
            raise InputError(
                "--cudnn needs --cuda", fix="give the CUDA toolkit too, e.g. --cuda 12.8 --cudnn"
            )
        cudnn = _need(
            repo_package(os_release.id, "cudnn", cuda=cuda),
            f"cuDNN for CUDA {cuda}",
            os_release.id,
            "drop --cudnn, or use another --cuda",
        )
        values["cudnn"] = cudnn
        dev = repo_package(os_release.id, "cudnn_dev", cuda=cuda)
        values["cudnn_install"] = tuple(
            _pinned(p, os_release.family) for p in (cudnn, dev) if p is not None
        )
    if options.nccl:
        if not cuda:
            raise InputError(
                "--nccl needs --cuda: NCCL is built per CUDA release",
                fix="give the CUDA toolkit too, e.g. --cuda 12.8 --nccl",
            )
        have = ", ".join(
            str(p.cuda_min.truncated(2))
            for p in _nccl_builds(os_release.id)
            if p.cuda_min is not None
        )
        nccl = _need(
            repo_package(os_release.id, "nccl", cuda=cuda),
            f"NCCL build pinned to CUDA {cuda}",
            os_release.id,
            f"choose a --cuda with a recorded NCCL build ({have}), or drop --nccl",
        )
        nccl_dev = repo_package(os_release.id, "nccl_dev", cuda=cuda)
        values["nccl"] = nccl
        values["nccl_install"] = tuple(
            _pinned(p, os_release.family) for p in (nccl, nccl_dev) if p is not None
        )
        decisions.append(
            Decision(
                "NCCL",
                " ".join(values["nccl_install"]),  # type: ignore[arg-type]
                f"the build for CUDA {cuda}: the repository's newest NCCL is built for its newest "
                "CUDA, so an unpinned install would not match the toolkit",
                nccl.source,
            )
        )
    if options.container_toolkit:
        values["container_toolkit"] = _need(
            repo_package(os_release.id, "container_toolkit"),
            "nvidia-container-toolkit",
            os_release.id,
            fix,
        )
        decisions.append(
            Decision(
                "container check",
                f"docker run --rm --runtime=nvidia --gpus all {values['smoke_image']} nvidia-smi",
                "NVIDIA's sample workload: nvidia-smi comes from the host driver, so the plain OS "
                "image adds no CUDA floor of its own",
                _SMOKE_SOURCE,
            )
        )
    text = render("host/install.sh.j2", **values)
    return Bundle(
        target="host",
        facts=facts,
        files=(
            GeneratedFile(
                "install-nvidia.sh",
                text,
                "shell",
                f"NVIDIA stack for {os_release.name}",
                executable=True,
            ),
        ),
        decisions=tuple(decisions),
    )


def _nccl_builds(os_id: str) -> list[RepoPackage]:
    return [p for p in repo_packages() if p.os_release == os_id and p.component == "nccl"]

"""`dlrig provision host`: the install script for one OS release.

Every NVIDIA package the script names comes from provision_nvidia_packages.csv (what NVIDIA's
repository holds for that release); the driver branch and kernel-module flavour from
`stack.driver_choice`. The script is idempotent (each step checks its result first), has
`--dry-run` and `--root DIR`, stops for a reboot after a driver install, and verifies at the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlrig.errors import InputError
from dlrig.knowledge.provision import RepoPackage
from dlrig.provision.model import Bundle, Decision, Facts, GeneratedFile
from dlrig.provision.render import header, render

_DISTRO_PACKAGES = {
    # What the script itself calls: curl (downloads), gpg (the container toolkit key), CA roots.
    "apt": ("ca-certificates", "curl", "gnupg"),
    "dnf": ("ca-certificates", "curl", "dnf-plugins-core"),
}
_HEADERS = {"apt": "linux-headers-$(uname -r)", "dnf": "kernel-devel-$(uname -r)"}
_OS_GLOB = {
    "ubuntu-22.04": "ubuntu-22.04",
    "ubuntu-24.04": "ubuntu-24.04",
    "debian-12": "debian-12",
    "rocky-9": "rocky-9*|rhel-9*|almalinux-9*",
}


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
    """apt installs an exact version where the table has one (cuDNN 8 builds per CUDA)."""
    return (
        f"{package.package}={package.version}"
        if package.version and family == "apt"
        else package.package
    )


def _stream(os_id: str, branch: str, modules: str) -> RepoPackage | None:
    from dlrig.knowledge.provision import repo_packages

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


def generate(facts: Facts, options: HostOptions | None = None, **kwargs: object) -> Bundle:
    from dlrig.knowledge.provision import repo_package, toolkit_minors
    from dlrig.provision.docker import smoke_test_image
    from dlrig.provision.stack import driver_choice, torch_choice

    options = options or HostOptions(**kwargs)  # type: ignore[arg-type]
    if facts.os is None:
        raise InputError(
            "provision host: the OS release is not known",
            fix="give --os ubuntu-22.04|ubuntu-24.04|debian-12|rocky-9, or --machine SNAPSHOT",
        )
    os_release = facts.os
    decisions: list[Decision] = [
        Decision("OS release", os_release.id, f"from {facts.origin}", os_release.source)
    ]
    needs_driver: tuple[str, ...] = ()
    if facts.torch:
        choice = torch_choice(facts)
        decisions.extend(choice.decisions)
        if choice.min_driver:
            needs_driver = (choice.min_driver,)
            decisions.append(
                Decision(
                    f"driver for torch {choice.torch_minor} {choice.cuda_variant}",
                    f">= {choice.min_driver}",
                    f"the wheel's CUDA {choice.cuda_version} needs it (resolver)",
                )
            )
    cuda = facts.cuda
    toolkit = None
    if cuda:
        minor = ".".join(cuda.split(".")[:2])
        toolkit = repo_package(os_release.id, "cuda_toolkit", cuda=minor)
        if toolkit is None:
            raise InputError(
                f"--cuda {cuda}: NVIDIA's {os_release.cuda_repo} repository has no CUDA {minor} toolkit "
                "(per dlrig's table of what it holds)",
                fix="choose one of "
                + ", ".join(toolkit_minors(os_release.id))
                + " for "
                + os_release.id
                + ", or another --os",
            )
        cuda = minor
        decisions.append(
            Decision(
                "CUDA toolkit",
                f"{toolkit.package} ({toolkit.version})",
                f"CUDA {minor} for {os_release.id}",
                toolkit.source,
            )
        )
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
        "headers_package": _HEADERS[os_release.family],
        "os_glob": _OS_GLOB.get(os_release.id, os_release.id),
        "cudnn": None,
        "cudnn_install": (),
        "nccl": None,
        "nccl_dev": None,
        "container_toolkit": None,
        "smoke_image": smoke_test_image(os_release, driver.branch),
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
        values["nccl"] = _need(repo_package(os_release.id, "nccl"), "NCCL", os_release.id, fix)
        values["nccl_dev"] = _need(
            repo_package(os_release.id, "nccl_dev"), "NCCL headers", os_release.id, fix
        )
    if options.container_toolkit:
        values["container_toolkit"] = _need(
            repo_package(os_release.id, "container_toolkit"),
            "nvidia-container-toolkit",
            os_release.id,
            fix,
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

"""`dlrig provision docker`: a Dockerfile on an nvidia/cuda tag that exists, with the locked
environment, a non-root user and a HEALTHCHECK; the `docker run` line and a compose file.

The tag comes from provision_cuda_images.csv, never from a formula: a tag is only used when
the table lists it (cudnn8 tags end at 12.3, version-less `cudnn` from 12.4.1, no cudnn tags
from CUDA 13, deleted EOL tags never), its CUDA is no newer than the driver runs, and a
supported tag beats an EOL one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlrig.errors import InputError
from dlrig.knowledge.provision import CudaImage, OsRelease
from dlrig.knowledge.versions import Version
from dlrig.provision.env import EnvOptions, files_for
from dlrig.provision.model import Bundle, Decision, Facts, GeneratedFile
from dlrig.provision.render import header, render
from dlrig.provision.stack import torch_choice


@dataclass(frozen=True)
class DockerOptions:
    packages: tuple[str, ...] = ()
    lock: bool = False
    flavor: str = "base"  # base | runtime | devel
    cudnn: bool = False
    image_name: str = "dlrig-train:latest"
    user: str = "train"
    uid: int = 1000
    cuda_variant: str | None = None


def driver_cuda(driver_version: str | None, branch: str | None) -> Version | None:
    """The newest CUDA the driver runs natively (what NVIDIA_REQUIRE_CUDA is checked against)."""
    from dlrig.knowledge.cuda import max_cuda_for_driver

    if driver_version:
        found = max_cuda_for_driver(driver_version)
        return Version.parse(found) if found else None
    if branch:
        found = max_cuda_for_driver(f"{branch}.999.99")
        return Version.parse(found) if found else None
    return None


def choose_image(
    image_os: tuple[str, ...],
    flavor: str,
    cudnn: str,
    max_cuda: Version | None,
    wanted: Version | None,
) -> tuple[CudaImage, str]:
    """The best listed tag: supported before EOL, never deleted, CUDA <= what the driver runs."""
    from dlrig.knowledge.provision import cuda_images

    candidates = [
        image
        for image in cuda_images()
        if image.os in image_os
        and flavor in image.flavors
        and image.cudnn == cudnn
        and image.status != "deleted"
        and (max_cuda is None or image.cuda_version.truncated(2) <= max_cuda.truncated(2))
    ]
    if not candidates:
        raise InputError(
            f"no nvidia/cuda {flavor} tag{' with ' + cudnn if cudnn else ''} in dlrig's table runs on a "
            f"driver limited to CUDA {max_cuda} for {', '.join(image_os)} (deleted EOL tags are never used)",
            fix="upgrade the driver (dlrig provision host), or drop --cudnn",
        )

    def rank(image: CudaImage) -> tuple[object, ...]:
        version = image.cuda_version
        same_major = wanted is not None and version.major == wanted.major
        below = wanted is not None and version.truncated(2) < wanted.truncated(2)
        return (
            image.status != "supported",
            below,  # an image older than the wheel's CUDA raises no floor but hides nothing either
            not same_major,
            image_os.index(image.os),
            -version.parts[0] * 1000 - version.parts[1] if not same_major else version.parts,
        )

    best = min(candidates, key=rank)
    why = f"{best.status} tag ({best.driver_branch})"
    if best.status == "eol":
        why += "; EOL: NVIDIA deletes EOL tags 6 months after EOL, so pin the digest or move to a supported CUDA"
    return best, why


def smoke_test_image(os_release: OsRelease, branch: str) -> str:
    """A base tag for `docker run --gpus all IMAGE nvidia-smi` after a host install."""
    image, _ = choose_image(
        (os_release.cuda_image_os, "ubuntu24.04", "ubuntu22.04"),
        "base",
        "",
        driver_cuda(None, branch),
        None,
    )
    return "nvidia/cuda:" + image.tag("base")


def _image_os_for(python: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    from dlrig.knowledge.provision import image_pythons

    fitting = [p for p in image_pythons() if p.python == python]
    if not fitting:
        known = ", ".join(f"{p.image_os} (Python {p.python})" for p in image_pythons())
        raise InputError(
            f"no nvidia/cuda image OS ships Python {python} as its system Python",
            fix=f"use --python with one of: {known}",
        )
    return tuple(p.image_os for p in fitting), fitting[0].packages


def generate(facts: Facts, options: DockerOptions | None = None, **kwargs: object) -> Bundle:
    options = options or DockerOptions(**kwargs)  # type: ignore[arg-type]
    if options.flavor not in {"base", "runtime", "devel"}:
        raise InputError(f"--flavor {options.flavor}: unknown", fix="use base, runtime or devel")
    if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", options.user) or options.user == "root":
        raise InputError(
            f"--user {options.user}: not a non-root user name", fix="use e.g. --user train"
        )
    from dlrig.knowledge.provision import image_pythons

    shipped = tuple(sorted({p.python for p in image_pythons()}))
    choice = torch_choice(facts, cuda_variant=options.cuda_variant, prefer_python=shipped)
    image_os, python_packages = _image_os_for(choice.python)
    from dlrig.knowledge.provision import image_pythons

    branch = None
    if not facts.driver_version:
        from dlrig.provision.stack import driver_choice

        branch = driver_choice(
            facts, needs_driver=(choice.min_driver,) if choice.min_driver else ()
        ).branch
    max_cuda = driver_cuda(facts.driver_version, branch)
    wanted = Version.parse(choice.cuda_version) if choice.cuda_version else None
    cudnn = ""
    if options.cudnn:
        cudnn = "cudnn" if wanted is None or wanted >= Version((12, 4)) else "cudnn8"
    image, why = choose_image(image_os, options.flavor, cudnn, max_cuda, wanted)
    tag = image.tag(options.flavor)
    env_files, decisions = files_for(
        facts, EnvOptions(packages=options.packages, lock=options.lock), choice
    )
    head = header(facts, "docker")
    requirement_files = [
        "requirements.lock" if options.lock else "requirements.in",
        "requirements-torch.txt",
    ]
    python_source = next(p.source for p in image_pythons() if p.image_os == image.os)
    decisions = [
        Decision(
            "base image",
            f"nvidia/cuda:{tag}",
            f"{why}; driver runs CUDA <= {max_cuda}"
            + (f" (R{branch})" if branch else f" (driver {facts.driver_version})"),
            image.source,
        ),
        Decision(
            "image Python",
            choice.python,
            f"{image.os}'s system Python fits torch {choice.torch_minor}",
            python_source,
        ),
        *decisions,
    ]
    warnings = (
        [f"nvidia/cuda:{tag} is EOL and may be deleted from Docker Hub"]
        if image.status == "eol"
        else []
    )
    files = [
        GeneratedFile(
            "Dockerfile",
            render(
                "docker/Dockerfile.j2",
                header=head,
                tag=tag,
                image_why=why.split(";")[0],
                python=choice.python,
                python_packages=python_packages,
                requirement_files=requirement_files,
                locked=options.lock,
                user=options.user,
                uid=options.uid,
            ),
            "dockerfile",
            f"image on nvidia/cuda:{tag}",
        ),
        GeneratedFile(
            "docker-run.sh",
            render("docker/docker-run.sh.j2", header=head, image_name=options.image_name),
            "shell",
            "build and run on all GPUs",
            executable=True,
        ),
        GeneratedFile(
            "compose.yaml",
            render("docker/compose.yaml.j2", header=head, image_name=options.image_name),
            "yaml",
            "docker compose with all GPUs",
        ),
        GeneratedFile(
            ".dockerignore",
            render("docker/dockerignore.j2", header=head),
            "text",
            "keeps data and checkpoints out of the build context",
        ),
        *[f for f in env_files if f.path != "environment.yml"],
    ]
    return Bundle(
        target="docker",
        facts=facts,
        files=tuple(files),
        decisions=tuple(decisions),
        warnings=tuple(warnings),
    )

"""`dlrig provision docker`: a Dockerfile on a base image that exists and matches the wheel,
with the locked environment, a non-root user and a HEALTHCHECK; the `docker run` line and a
compose file.

The base tag comes from provision_cuda_images.csv, never from a formula. An nvidia/cuda base
sets the container's driver floor (NVIDIA_REQUIRE_CUDA = its CUDA version), so the tag's CUDA
lies between what the torch wheel needs and what the host driver runs: the wheel's own CUDA
when the driver is not known (the image then runs wherever the wheel does), otherwise the
newest listed tag up to the driver's CUDA. Deleted EOL tags are never used; cuDNN tags follow
the table (cudnn8 up to 12.3, cudnn from 12.4.1, none from CUDA 13). When no listed tag fits,
the plain OS image with the NVIDIA runtime's variables set as nvidia/cuda images set them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Literal

from dlrig.errors import InputError
from dlrig.knowledge.cuda import max_cuda_for_driver
from dlrig.knowledge.provision import (
    CudaImage,
    ImagePython,
    cuda_images,
    image_pythons,
    torch_python,
)
from dlrig.knowledge.versions import Version
from dlrig.provision.env import EnvOptions, files_for
from dlrig.provision.model import Bundle, Decision, Facts, GeneratedFile
from dlrig.provision.render import header, render
from dlrig.provision.stack import TorchChoice, python_for, torch_choice, wheel_variant_for_cuda

_PLAIN_BASE_SOURCE = (
    "nvidia/cuda base images set ENV NVIDIA_REQUIRE_CUDA=cuda>=X.Y, NVIDIA_VISIBLE_DEVICES=all "
    "and NVIDIA_DRIVER_CAPABILITIES=compute,utility (gitlab.com/nvidia/container-images/cuda "
    "Dockerfiles, as in the image histories cited in provision_nvidia_packages.csv); the NVIDIA "
    "Container Toolkit reads them (docs.nvidia.com/datacenter/cloud-native/container-toolkit, "
    "'Specialized Configurations with Docker'; secondary: not re-read here)"
)


@dataclass(frozen=True)
class DockerOptions:
    packages: tuple[str, ...] = ()
    lock: bool = False
    flavor: Literal["base", "runtime", "devel"] = "base"
    cudnn: bool = False
    image_name: str = "dlrig-train:latest"
    user: str = "train"
    uid: int = 1000
    cuda_variant: str | None = None


@dataclass(frozen=True)
class BaseImage:
    image: str  # "nvidia/cuda:12.8.1-base-ubuntu24.04" | "ubuntu:24.04"
    python: ImagePython
    tag: CudaImage | None  # None: the plain OS image
    require_cuda: str | None  # plain base on a CUDA wheel: the NVIDIA_REQUIRE_CUDA we set
    why: str
    source: str | None


def driver_cuda(driver_version: str | None, branch: str | None) -> Version | None:
    """The newest CUDA the driver runs natively (what NVIDIA_REQUIRE_CUDA is checked against)."""
    if driver_version:
        found = max_cuda_for_driver(driver_version)
        return Version.parse(found) if found else None
    if branch:
        found = max_cuda_for_driver(f"{branch}.999.99")
        return Version.parse(found) if found else None
    return None


def choose_tag(
    image_os: str,
    flavor: str,
    cudnn: bool,
    low: Version | None,
    high: Version | None,
) -> CudaImage | None:
    """The newest listed, not deleted nvidia/cuda tag for this OS whose CUDA is at least the
    wheel's (`low`) and at most the driver's (`high`).

    When the driver runs an older CUDA than the wheel's (minor-version compatibility within a
    major), the newest tag up to the driver's CUDA of that major. A devel image keeps the
    wheel's CUDA major: nvcc of another major cannot build extensions for that torch.
    """

    def cuda_of(image: CudaImage) -> Version:
        return image.cuda_version.truncated(2)

    fitting = [
        image
        for image in cuda_images()
        if image.os == image_os
        and flavor in image.flavors
        and bool(image.cudnn) == cudnn
        and image.status != "deleted"
        and (high is None or cuda_of(image) <= high)
    ]
    if low is not None:
        if high is not None and high < low:
            fitting = [i for i in fitting if i.cuda_version.major == low.major]
        else:
            fitting = [i for i in fitting if cuda_of(i) >= low]
        if flavor == "devel":
            fitting = [i for i in fitting if i.cuda_version.major == low.major]
    return max(fitting, key=lambda i: i.cuda_version) if fitting else None


def _image_oses(facts: Facts) -> tuple[list[str], str]:
    """The image OSes to try, in order, and why: a stated --os only; else the snapshot's own
    OS first, then the table's order."""
    known = list(dict.fromkeys(p.image_os for p in image_pythons()))
    if facts.os is None:
        return known, "no OS stated: the newest image OS the table lists first"
    wanted = facts.os.cuda_image_os
    note = ""
    if not wanted.startswith(facts.os.id.split("-")[0]):
        note = f" (NVIDIA publishes no {facts.os.name} images: {wanted}, per provision_os_releases.csv)"
    if "os" in facts.stated:
        return [wanted], f"--os {facts.os.id}{note}"
    return [wanted, *(k for k in known if k != wanted)], f"the snapshot's OS first{note}"


def _pythons(image_os: str, choice: TorchChoice, facts: Facts) -> list[ImagePython]:
    """The Pythons this image OS installs that fit the torch release (and a stated --python),
    the newest first but not past 3.12 (the newest Pythons lag in other packages' wheels)."""
    span = torch_python(choice.torch_minor)
    low = Version.parse(span[0]) if span else None
    high = Version.parse(span[1]) if span else None
    wanted = facts.python if facts.python_from == "stated" else None
    fitting = []
    for row in image_pythons():
        version = Version.parse(row.python)
        if row.image_os != image_os or version is None:
            continue
        if (low and version < low) or (high and version > high):
            continue
        if wanted and row.python != ".".join(wanted.split(".")[:2]):
            continue
        fitting.append(row)
    return sorted(
        fitting,
        key=lambda r: (
            (Version.parse(r.python) or Version((0,))) > Version((3, 12)),
            -(Version.parse(r.python) or Version((0,))).minor,
        ),
    )


def choose_base(facts: Facts, choice: TorchChoice, options: DockerOptions) -> BaseImage:
    oses, os_why = _image_oses(facts)
    cpu = choice.cuda_variant == "cpu" or not choice.cuda_version
    low = None if cpu else (Version.parse(choice.cuda_version) or Version((0,))).truncated(2)
    high: Version | None
    if facts.driver_version:
        high = driver_cuda(facts.driver_version, None)
        driver_text = f"driver {facts.driver_version} runs CUDA <= {high}"
    else:
        high = low
        driver_text = (
            "driver not known: the image's CUDA is the wheel's, so it runs on any driver the "
            "wheel runs on"
        )
    window = f"CUDA {low}" + (f"..{high}" if high != low else "")
    if high is not None and low is not None and high < low:
        window = f"CUDA {low.major}.x up to {high} (minor-version compatibility)"
    first_fit: tuple[str, ImagePython] | None = None
    unfit: list[str] = []
    for image_os in oses:
        pythons = _pythons(image_os, choice, facts)
        if not pythons:
            unfit.append(image_os)
            continue
        if first_fit is None:
            first_fit = (image_os, pythons[0])
        if cpu:
            break
        tag = choose_tag(image_os, options.flavor, options.cudnn, low, high)
        if tag is not None:
            why = (
                f"{os_why}; the wheel is {choice.cuda_variant} (CUDA {low}), {driver_text}: the "
                f"newest listed tag in {window} ({tag.status}, driver branch {tag.driver_branch})"
            )
            return BaseImage(
                f"nvidia/cuda:{tag.tag(options.flavor)}", pythons[0], tag, None, why, tag.source
            )
    if first_fit is None:
        have = ", ".join(
            f"{p.image_os} Python {p.python}" for p in image_pythons() if p.image_os in oses
        )
        raise InputError(
            f"no image OS fits torch {choice.torch_minor}"
            + (f" with --python {facts.python}" if facts.python_from == "stated" else "")
            + f": {', '.join(oses)} install {have}",
            fix="choose another --torch, --python or --os",
        )
    image_os, python = first_fit
    if options.cudnn:
        raise InputError(
            f"--cudnn: no listed nvidia/cuda {options.flavor} tag with cuDNN for {image_os} in "
            f"{window} ({driver_text}; deleted EOL tags are never used)",
            fix="drop --cudnn (the torch wheel brings its own cuDNN), or give the --driver the "
            "image will run on",
        )
    if not cpu and options.flavor != "base":
        raise InputError(
            f"--flavor {options.flavor}: no listed nvidia/cuda {options.flavor} tag for {image_os} "
            f"in {window} ({driver_text}; deleted EOL tags are never used)",
            fix="use --flavor base (the torch wheel brings its own CUDA runtime), or give the "
            "--driver the image will run on",
        )
    if cpu:
        why = f"{os_why}; a CPU wheel needs no CUDA base"
        return BaseImage(python.os_image, python, None, None, why, python.source)
    # The floor the image states: the wheel's CUDA, or the driver's where the wheel runs on an
    # older driver through minor-version compatibility (a higher floor would refuse that host).
    floor = high if high is not None and low is not None and high < low else low
    why = (
        f"{os_why}; the wheel is {choice.cuda_variant} (CUDA {low}), {driver_text}; no listed "
        f"nvidia/cuda tag in {window} still exists (NVIDIA deletes EOL tags): the plain OS image, "
        f"with NVIDIA_REQUIRE_CUDA=cuda>={floor} and the runtime variables nvidia/cuda images set"
    )
    return BaseImage(python.os_image, python, None, str(floor), why, _PLAIN_BASE_SOURCE)


def _check_options(options: DockerOptions) -> None:
    if options.flavor not in {"base", "runtime", "devel"}:
        raise InputError(f"--flavor {options.flavor}: unknown", fix="use base, runtime or devel")
    if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", options.user) or options.user == "root":
        raise InputError(
            f"--user {options.user}: not a non-root user name", fix="use e.g. --user train"
        )
    if not 1 <= options.uid < 65534:
        raise InputError(f"--uid {options.uid}: not a non-root UID", fix="use e.g. 1000")


def generate(facts: Facts, options: DockerOptions | None = None) -> Bundle:
    from dataclasses import replace

    options = options or DockerOptions()
    _check_options(options)
    flavor_note = None
    if options.cudnn and options.flavor == "base":
        # nvidia/cuda publishes cuDNN only in runtime and devel images (the tag table).
        options = replace(options, flavor="runtime")
        flavor_note = Decision(
            "image flavour",
            "runtime",
            "--cudnn: nvidia/cuda has cuDNN tags in runtime and devel flavours only",
        )
    choice = torch_choice(facts, cuda_variant=wheel_variant_for_cuda(facts, options.cuda_variant))
    base = choose_base(facts, choice, options)
    # The image's Python replaces the environment's default choice.
    python, python_decision = python_for(choice.torch_minor, base.python.python, "the image OS", ())

    choice = replace(
        choice,
        python=python,
        decisions=tuple(d for d in choice.decisions if d.what != "python"),
    )
    env_files, decisions = files_for(
        facts, EnvOptions(packages=options.packages, lock=options.lock), choice
    )
    head = header(facts, "docker")
    other_requirements = "requirements.lock" if options.lock else "requirements.in"
    decisions = [
        Decision("base image", base.image, base.why, base.source),
        Decision(
            "image Python",
            f"{python} ({' '.join(base.python.packages)})",
            f"{base.python.image_os} installs Python {python} from its own packages; "
            + python_decision.why,
            base.python.source,
        ),
        Decision(
            "install order",
            f"requirements-torch.txt, then {other_requirements}",
            "torch first, from the PyTorch index: a --with package that depends on torch "
            "(accelerate, lightning, timm, ...) would otherwise pull PyPI's torch build first; "
            "the rest is then constrained to what is installed"
            + (" (--no-deps: the lock leaves out what torch brings)" if options.lock else "")
            + ", and pip check verifies the result",
        ),
        *decisions,
    ]
    if flavor_note is not None:
        decisions.insert(1, flavor_note)
    warnings = []
    if base.tag is not None and base.tag.status == "eol":
        warnings.append(
            f"{base.image} is EOL: NVIDIA deletes EOL tags from Docker Hub about 6 months after "
            "their end of life; pin its digest, or move to a supported CUDA"
        )
    cuda_wheel = choice.cuda_variant != "cpu"
    files = [
        GeneratedFile(
            "Dockerfile",
            # The options' own fields (lock, user, uid) are template variables by their names.
            render(
                "docker/Dockerfile.j2",
                header=head,
                base=base,
                other_requirements=other_requirements,
                cuda_wheel=cuda_wheel,
                **asdict(options),
            ),
            "dockerfile",
            f"image on {base.image}",
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
    return Bundle.of("docker", facts, files, decisions, warnings)

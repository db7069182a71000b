"""`dlrig provision env --framework tensorflow|jax`: an environment of TensorFlow or JAX whose
CUDA wheels fit the machine.

The release is the newest whose own wheel metadata (`framework_gpu_pins.csv`) this machine can
run: its CUDA major within the driver's reach (minor-version compatibility counted, as the
wheels bring their own CUDA runtime), its Requires-Python and its glibc floor (TensorFlow 2.21
and JAX plugins from 0.7.1 are manylinux_2_27). The requirement is the framework's own GPU
extra (`tensorflow[and-cuda]`, `jax[cuda12]`/`jax[cuda13]`), so pip or uv resolves the nvidia-*
wheels the release pinned; without a GPU it is the CPU build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlrig.errors import InputError
from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge import framework_pins, rocm
from dlrig.knowledge.versions import Version
from dlrig.provision.model import Decision, Facts

FRAMEWORKS = ("torch", "tensorflow", "jax")
DEFAULT_PYTHON = "3.12"
_CUDA_MAJOR = re.compile(r"-cu(\d+)$")


@dataclass(frozen=True)
class FrameworkChoice:
    framework: str  # tensorflow | jax
    version: str
    requirement: str  # "tensorflow[and-cuda]==2.21.0" | "jax[cuda12]==0.10.2" | "jax==0.10.2"
    python: str
    cuda_major: int | None  # None: a CPU build
    decisions: tuple[Decision, ...]


def _cuda_major(pins: tuple[framework_pins.Pin, ...]) -> int | None:
    if pins and pins[0].framework == "jax-cuda13-plugin":
        return 13
    for pin in pins:
        match = _CUDA_MAJOR.search(pin.requirement)
        if match:
            return int(match.group(1))
    return None


def _runtime(pins: tuple[framework_pins.Pin, ...]) -> str | None:
    """The CUDA runtime x.y the release's wheels bring ("12.5")."""
    for pin in pins:
        if pin.requirement.startswith("nvidia-cuda-runtime"):
            # the lower bound (==X or >=X), not an upper one ("<13.0,>=12.5.82")
            bound = re.search(r"(?:==|>=|~=)\s*(\d+\.\d+)", pin.specifier)
            return bound.group(1) if bound else None
    return None


def _driver_runs(driver: str | None, cuda: str | None) -> bool:
    if driver is None or cuda is None:
        return True  # nothing known against it: the newest release is offered, said so
    need = cuda_knowledge.driver_requirement(cuda)
    have = Version.parse(driver)
    if need is None or have is None:
        return True
    floor = need.minor_compat_floor or need.full_support
    return have >= floor


def _python_fits(python: str, pin: framework_pins.Pin) -> bool:
    """A wheel for this CPython exists (Requires-Python alone is not enough: TensorFlow 2.14
    allows 3.12 but ships no cp312 wheel)."""
    if pin.requires_python and not framework_pins.satisfies(python, pin.requires_python):
        return False
    wanted = Version.parse(python)
    return any(
        wanted is not None and Version.parse(v) == wanted.truncated(2)
        for v in pin.pythons.split(";")
        if v
    )


def _glibc_fits(facts: Facts, glibc_min: str) -> bool:
    machine = facts.machine
    have = machine.os.glibc_version if machine and machine.os else None
    if not have or not glibc_min:
        return True
    parsed, floor = Version.parse(have), Version.parse(glibc_min)
    return parsed is None or floor is None or parsed >= floor


def _table_name(framework: str, cuda_major: int) -> str:
    # TensorFlow has one table name for every CUDA major; JAX one plugin per major.
    return "tensorflow" if framework == "tensorflow" else f"jax-cuda{cuda_major}-plugin"


def choose(
    facts: Facts, framework: str, version: str | None = None, cpu: bool = False
) -> FrameworkChoice:
    """The release and requirement line for `framework` on this machine (InputError, exit 2,
    when a stated --framework-version has no row or nothing fits)."""
    python = facts.python or DEFAULT_PYTHON
    gpu = not cpu and (facts.gpu is not None or bool(facts.gpu_name))
    # TensorFlow's and-cuda extra: CUDA 11 wheels in 2.14, CUDA 12 from 2.15 (none for 13 yet).
    majors = (12, 11) if framework == "tensorflow" else (13, 12)
    candidates: list[tuple[Version, str, int, tuple[framework_pins.Pin, ...]]] = []
    for major in majors:
        name = _table_name(framework, major)
        for release in framework_pins.known_versions(name):
            pins = framework_pins.pins_for(name, release)
            if _cuda_major(pins) != major:
                continue
            parsed = Version.parse(release)
            # jax[cudaN]==X pins the plugin and jaxlib to X: post releases of a plugin alone
            # (0.12.0.1) have no jax of that number.
            if parsed is not None and (framework == "tensorflow" or release.count(".") == 2):
                candidates.append((parsed, release, major, pins))
    if version is not None:
        candidates = [c for c in candidates if c[1] == version]
        if not candidates:
            raise InputError(
                f"--framework-version {version}: no {framework} release with CUDA wheel pins of "
                "that number in dlrig's table",
                fix="leave it out for the newest that fits, or give a release listed by "
                f"`pip index versions {framework}`",
            )
    why: list[str] = []
    fitting = []
    for _parsed, release, major, pins in sorted(candidates, reverse=True):
        first = pins[0]
        if not _python_fits(python, first):
            why.append(f"{release}: no wheel for Python {python} ({first.pythons or 'none'})")
            continue
        if not _glibc_fits(facts, first.glibc_min):
            why.append(f"{release}: needs glibc {first.glibc_min}")
            continue
        if gpu and not _driver_runs(facts.driver_version, _runtime(pins)):
            why.append(f"{release}: CUDA {_runtime(pins)} needs a newer driver")
            continue
        fitting.append((release, major, pins))
    if not fitting:
        raise InputError(
            f"no {framework} release in dlrig's table fits this machine ("
            + "; ".join(why[:3])
            + ")",
            fix="state --python (a Python the release supports) or upgrade the driver",
        )
    release, major, pins = fitting[0]
    base = "tensorflow" if framework == "tensorflow" else "jax"
    if not gpu:
        requirement = f"{base}=={release}"
        cuda_major = None
        detail = "no GPU in the facts: the CPU build"
    elif framework == "tensorflow":
        requirement = f"tensorflow[and-cuda]=={release}"
        cuda_major = major
        detail = f"[and-cuda] brings the CUDA {_runtime(pins)} wheels it pins"
    else:
        requirement = f"jax[cuda{major}]=={release}"
        cuda_major = major
        detail = f"the CUDA {major} plugin and the nvidia-* wheels it requires"
    reach = (
        f"driver {facts.driver_version} runs CUDA {_runtime(pins)}"
        if gpu and facts.driver_version
        else "no driver stated"
    )
    decisions = (
        Decision(
            framework,
            requirement,
            f"newest release whose wheels fit Python {python} and this machine ({reach}); {detail}",
            pins[0].source,
        ),
    )
    return FrameworkChoice(framework, release, requirement, python, cuda_major, decisions)


def vendor_of(facts: Facts) -> str | None:
    """Whose GPUs the environment is for: the snapshot's, else the stated --gpu's."""
    machine = facts.machine
    for gpu in (machine.gpus or ()) if machine is not None else ():
        return gpu.vendor or "nvidia"
    return facts.gpu.vendor if facts.gpu is not None else None


def check_vendor(vendor: str | None, framework: str, cuda_variant: str | None) -> None:
    """Wheels of one vendor's stack do not run on another's GPUs: refuse, naming what does."""
    variant = cuda_variant or ""
    if variant == "cpu":
        return  # a CPU build runs beside any vendor's GPUs
    if vendor == "intel-gaudi":
        raise InputError(
            "provision env: Intel Gaudi runs Intel's own PyTorch build, not these wheels",
            fix="use the Intel Gaudi PyTorch container of the driver's release (dlrig doctor "
            "names that release's PyTorch)",
        )
    if vendor == "amd" and framework != "torch":
        raise InputError(
            f"--framework {framework}: dlrig's tables hold NVIDIA builds only for it; "
            "this machine has AMD GPUs",
            fix=f"use AMD's rocm/{framework} container images",
        )
    if vendor == "amd" and variant and not variant.startswith("rocm"):
        raise InputError(
            f"--cuda-variant {variant}: a CUDA wheel on a machine with AMD GPUs",
            fix="give a ROCm variant (--cuda-variant rocm6.2) or leave it out",
        )
    if vendor == "nvidia" and variant.startswith("rocm"):
        raise InputError(
            f"--cuda-variant {variant}: a ROCm wheel for an NVIDIA GPU",
            fix="leave it out (the resolver picks the CUDA wheel) or give a cuXYZ variant",
        )


def rocm_variant_for(facts: Facts) -> str:
    """The ROCm index for an AMD machine: the newest variant of the installed ROCm's major."""
    machine = facts.machine
    installed = machine.rocm.version if machine is not None and machine.rocm else None
    return rocm.newest_build(installed).rocm_variant

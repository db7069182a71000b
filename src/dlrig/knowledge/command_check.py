"""Reading install commands back: do the wheel, index, companions and driver exist together?

`check_command(text)` finds every `pip install` naming torch, torchvision or torchaudio in a
fix (and any "driver ≥ X" it tells the user to install) and says, from the same tables the
resolver uses, what cannot work: a variant the release never shipped, a torchvision built for
another torch, a wheel without the GPU's architecture, a driver below the wheel's minimum.
Tests run it over every fix doctor and diagnose print.
"""

from __future__ import annotations

import re
import shlex

from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge import pytorch as torch_knowledge
from dlrig.knowledge import rocm
from dlrig.knowledge.install_commands import install_style, normalise_platform
from dlrig.knowledge.versions import Version, minor_of

_PIP = re.compile(r"\bpip3?\s+install\b(?P<rest>[^\n;&|]*)")
_INDEX = re.compile(r"https?://download\.pytorch\.org/whl/(?P<path>[\w./-]+)")
_PIN = re.compile(
    r"^(?P<name>torch|torchvision|torchaudio)(?:(?:==|>=)(?P<version>[\w.*+]+)(?:,<=?[\w.]+)?)?$"
)
_DRIVER_TARGET = re.compile(
    r"(?:driver|nvidia-driver)[^\n]{0,40}?(?:≥|>=|at least)\s*(?P<v>\d{3}(?:\.\d+)*)"
)


def _variant_of(path: str) -> str | None:
    parts = [p for p in path.split("/") if p and p != "torch_stable.html"]
    for part in reversed(parts):
        if part == "cpu" or (part.startswith("cu") and part[2:].isdigit()):
            return part
        if part.startswith("rocm") and Version.parse(part[4:]) is not None:
            return part
    return None


def check_command(
    text: str,
    compute_capabilities: tuple[str, ...] = (),
    driver_version: str | None = None,
    platform: str = "linux-x86_64",
) -> list[str]:
    """What in these install commands cannot work together, per the tables; [] when all fits.

    Every `pip install` naming torch, torchvision or torchaudio must pin them, point at one
    download.pytorch.org index whose variant that release shipped, with companions built for
    that torch; the wheel must carry the GPUs' architectures; the driver (the one given, or
    the "driver ≥ X" the text tells the user to install) must meet the wheel's minimum.
    """
    problems: list[str] = []
    targets = [Version.parse(m.group("v")) for m in _DRIVER_TARGET.finditer(text)]
    stated = max((t for t in targets if t is not None), default=None)
    driver = Version.parse(driver_version) if driver_version else None
    effective = max((d for d in (driver, stated) if d is not None), default=None)
    for match in _PIP.finditer(text):
        problems.extend(
            _check_one(
                match.group(0), compute_capabilities, effective, normalise_platform(platform)
            )
        )
    return problems


def _check_one(
    command: str, capabilities: tuple[str, ...], driver: Version | None, platform: str
) -> list[str]:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    pins = {}
    for word in words:
        match = _PIN.match(word)
        if match:
            pins[match.group("name")] = match.group("version")
    index = _INDEX.search(command)
    if not pins:
        if index:
            return [f"{command.strip()!r}: names a PyTorch index but no torch package"]
        return []
    problems = []
    label = command.strip()
    torch_pin = pins.get("torch")
    if torch_pin is None:
        return [f"{label!r}: installs {', '.join(pins)} without pinning torch"]
    if any(version is None for version in pins.values()):
        unpinned = [name for name, version in pins.items() if version is None]
        problems.append(f"{label!r}: {', '.join(unpinned)} not pinned to a release")
    minor = minor_of(torch_pin.replace(".*", ""))
    if minor is None or minor not in torch_knowledge.releases():
        return [*problems, f"{label!r}: torch {torch_pin} is not a release in the tables"]
    local = {name: v.split("+", 1)[1] for name, v in pins.items() if v and "+" in v}
    variant = _variant_of(index.group("path")) if index else None
    if variant is None:
        if platform.startswith("macos"):
            return problems
        return [*problems, f"{label!r}: no download.pytorch.org index names the CUDA variant"]
    for name, tag in local.items():
        if tag != variant:
            problems.append(f"{label!r}: {name} is pinned to +{tag} but the index is {variant}")
    if variant.startswith("rocm"):
        # ROCm wheels: a variant the release never shipped (where the table lists them all),
        # companions of another release; no CUDA driver floor.
        shipped_rocm = any(
            b.torch_version == minor and b.rocm_variant == variant for b in rocm.builds()
        )
        if not shipped_rocm and rocm.complete_for(minor):
            problems.append(f"{label!r}: torch {minor} never shipped a {variant} wheel")
        problems.extend(_check_companions(label, pins, minor, variant))
        return problems
    exact = torch_pin.replace(".*", "").split("+")[0]
    shipped = {v.cuda_variant: v for v in torch_knowledge.variants_of(exact)}
    if variant != "cpu" and variant not in shipped:
        names = ", ".join(sorted(shipped)) or "none"
        problems.append(
            f"{label!r}: torch {exact} never shipped a {variant} wheel (it has {names})"
        )
        return problems
    problems.extend(_check_companions(label, pins, minor, variant))
    style = install_style(minor)
    if style is not None and style.pip_option not in words:
        problems.append(f"{label!r}: torch {minor} wheels are reached with {style.pip_option}")
    if variant == "cpu":
        # A CPU wheel for GPUs is wrong unless no published wheel has kernels for them.
        if any(_some_wheel_runs(c) for c in capabilities):
            problems.append(f"{label!r}: a CPU-only wheel cannot use the GPUs")
        return problems
    entry = torch_knowledge.arch_list(minor, variant, platform) or torch_knowledge.arch_list(
        minor, variant
    )
    for capability in capabilities:
        if entry is not None and not entry.supports(capability):
            problems.append(
                f"{label!r}: torch {minor} {variant} has no kernels for compute capability {capability}"
            )
    cuda = shipped[variant].cuda_version
    requirement, _ = cuda_knowledge.driver_requirement_for(cuda, platform.startswith("windows"))
    if driver is not None and requirement is not None:
        floor = requirement.full_support
        if requirement.minor_compat_floor and requirement.minor_compat_floor < floor:
            floor = requirement.minor_compat_floor
        if driver < floor:
            problems.append(
                f"{label!r}: {variant} (CUDA {cuda}) needs driver ≥ {floor}; the driver is {driver}"
            )
    return problems


def _some_wheel_runs(capability: str) -> bool:
    return any(entry.supports(capability) for entry in torch_knowledge.arch_lists())


def _check_companions(
    label: str, pins: dict[str, str | None], minor: str, variant: str
) -> list[str]:
    problems = []
    vision = pins.get("torchvision")
    if vision:
        paired = torch_knowledge.torch_for_torchvision(vision.replace(".*", "").split("+")[0])
        if paired is not None and paired != minor:
            problems.append(
                f"{label!r}: torchvision {vision} is built for torch {paired}, not {minor}"
            )
    audio = pins.get("torchaudio")
    if audio:
        paired = torch_knowledge.torch_for_torchaudio(audio.replace(".*", "").split("+")[0])
        later = (Version.parse(minor) or Version((0,))) >= Version((2, 11))
        if paired is not None and paired != minor and not (later and paired == "2.11"):
            problems.append(
                f"{label!r}: torchaudio {audio} is built for torch {paired}, not {minor}"
            )
        if later and paired == "2.11" and minor != "2.11":
            shipped = {v.cuda_variant for v in torch_knowledge.variants_of("2.11")} | {"cpu"}
            if variant not in shipped:
                problems.append(f"{label!r}: torchaudio 2.11 has no {variant} wheel")
    return problems

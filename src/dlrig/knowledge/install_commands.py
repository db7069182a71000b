"""The install the resolver chose, written out: pip pins and the wheel index of one release.

How pip reaches a release's CUDA wheels changed over the years (find-links pages up to 1.10,
`--extra-index-url` for 1.11-1.13, `--index-url` since 2.0); the table
`pytorch_install_commands.csv` records it, so every command is one PyTorch published.
"""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from dlrig.knowledge import pytorch as torch_knowledge
from dlrig.knowledge.driver_choice import (  # re-exported: first published here
    DriverUpgrade,
    branch_for,
    driver_upgrade_for,
    recommended_branch_driver,
)
from dlrig.knowledge.tables import record, versioned_rows
from dlrig.knowledge.versions import Version, minor_of, release

if TYPE_CHECKING:
    from dlrig.knowledge.resolver import Request
    from dlrig.knowledge.wheel_fit import DriverMode

__all__ = [
    "DriverUpgrade",
    "Install",
    "InstallStyle",
    "branch_for",
    "driver_upgrade_for",
    "install_for",
    "install_style",
    "normalise_platform",
    "recommended_branch_driver",
]

_PLATFORMS = {
    "linux": "linux-x86_64",
    "linux-x86_64": "linux-x86_64",
    "x86_64": "linux-x86_64",
    "linux-aarch64": "linux-aarch64",
    "aarch64": "linux-aarch64",
    "linux-arm64": "linux-aarch64",
    "windows": "windows-x86_64",
    "win": "windows-x86_64",
    "windows-x86_64": "windows-x86_64",
    "macos": "macos-arm64",
    "darwin": "macos-arm64",
    "macos-arm64": "macos-arm64",
    "macos-x86_64": "macos-x86_64",
}


def normalise_platform(platform: str | None) -> str:
    key = (platform or "linux-x86_64").strip().lower()
    return _PLATFORMS.get(key, key)


@dataclass(frozen=True)
class InstallStyle:
    torch_from: Version
    torch_to: Version | None
    pip_option: Literal["-f", "--extra-index-url", "--index-url"]
    url: str  # with {variant}
    source: str


@functools.cache
def install_styles() -> tuple[InstallStyle, ...]:
    return tuple(
        record("pytorch_install_commands", InstallStyle, row, torch_from=start)
        for start, row in versioned_rows("pytorch_install_commands", "torch_from")
    )


def install_style(torch_minor: str) -> InstallStyle | None:
    wanted = Version.parse(torch_minor)
    if wanted is None:
        return None
    for style in install_styles():
        if style.torch_from <= wanted and (style.torch_to is None or wanted <= style.torch_to):
            return style
    return None


@dataclass(frozen=True)
class Install:
    """A torch wheel and its companions from one index, and the driver the wheel needs."""

    torch_version: str  # what is pinned: "2.5.1" (an exact release) or "2.5" (its newest patch)
    torch_minor: str  # "2.5"
    cuda_variant: str  # "cu124" | "cpu"
    cuda_version: str | None  # "12.4"; None for CPU wheels
    index_url: str | None  # https://download.pytorch.org/whl/cu124; None = PyPI (macOS)
    pip_option: Literal["--index-url", "--extra-index-url", "-f"] | None  # None: PyPI
    torchvision_version: str | None  # the minor that pairs: "0.20"
    torchaudio_version: str | None  # "2.5"; None when no torchaudio fits
    min_driver: str | None  # Table-3 minimum for full support (and the GPUs' own floor)
    min_driver_compat: str | None  # lower floor through minor-version compatibility
    driver_mode: DriverMode  # against the driver asked about
    status: str  # stable | experimental (RELEASE.md's words, from the releases table)
    platform: str
    notes: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    # Exact torchvision releases, where another torch minor shares the torchvision minor.
    torchvision_releases: tuple[str, ...] = ()

    @property
    def source_url(self) -> str | None:
        """What pip is pointed at: the index, or the find-links page of old releases."""
        if self.index_url is None:
            return None
        if self.pip_option == "-f":
            return f"{self.index_url}/torch_stable.html"
        return self.index_url

    def requirements(self, torchvision: bool = True, torchaudio: bool = True) -> tuple[str, ...]:
        """pip requirement strings: "torch==2.5.1", "torchvision==0.20.*", "torchaudio==2.5.*"."""
        exact = len((Version.parse(self.torch_version) or Version((0,))).parts) >= 3
        pins = [f"torch=={self.torch_version}" if exact else f"torch=={self.torch_minor}.*"]
        if torchvision and self.torchvision_version:
            pins.append(self._torchvision_pin())
        if torchaudio and self.torchaudio_version:
            pins.append(f"torchaudio=={self.torchaudio_version}.*")
        return tuple(pins)

    def _torchvision_pin(self) -> str:
        releases = self.torchvision_releases
        if not releases:
            return f"torchvision=={self.torchvision_version}.*"
        exact = Version.parse(self.torch_version)
        if len(releases) == 1:
            return f"torchvision=={releases[0]}"
        if exact is not None and len(exact.parts) >= 3 and exact.parts[2] < len(releases):
            # torchvision_releases lists one release per torch patch, in order (1.3.0 -> 0.4.1).
            return f"torchvision=={releases[exact.parts[2]]}"
        return f"torchvision>={releases[0]},<={releases[-1]}"

    def pip_args(self) -> tuple[str, ...]:
        url = self.source_url
        return (self.pip_option, url) if self.pip_option and url else ()

    def pip_command(
        self, force_reinstall: bool = False, torchvision: bool = True, torchaudio: bool = True
    ) -> str:
        words = ["pip", "install"]
        if force_reinstall:
            words.append("--force-reinstall")
        words.extend(self.requirements(torchvision, torchaudio))
        words.extend(self.pip_args())
        return " ".join(shlex.quote(w) if any(c in w for c in "*<>") else w for w in words)


def _torchaudio_for(minor: str, variant: str) -> tuple[str | None, str | None]:
    """The torchaudio minor for this torch, and a note when there is none or it is shared."""
    entry = torch_knowledge.companions().get(minor)
    if entry is not None and entry.torchaudio_version:
        return entry.torchaudio_version, None
    wanted = Version.parse(minor)
    last = torch_knowledge.companions().get("2.11")
    if wanted is not None and wanted > Version((2, 11)) and last and last.torchaudio_version:
        # torchaudio 2.11 is built on the stable ABI and supports every later torch; its wheels
        # exist for the variants torch 2.11 shipped.
        shipped = {v.cuda_variant for v in torch_knowledge.variants_of("2.11")} | {"cpu"}
        if variant in shipped:
            return last.torchaudio_version, "torchaudio 2.11 supports torch 2.11 and later"
        return None, f"no torchaudio wheel for {variant}: torchaudio 2.11 shipped {sorted(shipped)}"
    return None, f"no torchaudio release is recorded for torch {minor}"


def install_for(
    request: Request,
    minor: str,
    variant: str,
    cuda: str | None,
    status: str,
    platform: str,
    full_min: Version | None,
    compat_min: Version | None,
    mode: DriverMode,
    sources: tuple[str, ...],
) -> Install:
    notes: list[str] = []
    wanted = request.torch_version
    torch_version = minor
    if wanted and minor_of(wanted) == minor:
        exact = Version.parse(release(wanted))
        if exact is not None and len(exact.parts) >= 3:
            torch_version = str(exact)
    companions = torch_knowledge.companions().get(minor)
    torchvision = companions.torchvision_version if companions and request.torchvision else None
    torchaudio, note = _torchaudio_for(minor, variant) if request.torchaudio else (None, None)
    if note:
        notes.append(note)
    index_url = pip_option = None
    if not platform.startswith("macos"):
        style = install_style(minor)
        if style is not None:
            base = style.url.replace("{variant}", variant)
            index_url = base.removesuffix("/torch_stable.html")
            pip_option = style.pip_option
            sources = (*sources, style.source)
    if Version.parse(minor) is not None and (Version.parse(minor) or Version((0,))) < Version(
        (1, 2)
    ):
        notes.append(
            "wheels of this release carry no CUDA tag in their version: check "
            '`python -c "import torch; print(torch.version.cuda)"` after installing'
        )
    return Install(
        torch_version=torch_version,
        torch_minor=minor,
        cuda_variant=variant,
        cuda_version=cuda,
        index_url=index_url,
        pip_option=pip_option,
        torchvision_version=torchvision,
        torchvision_releases=companions.torchvision_releases if companions and torchvision else (),
        torchaudio_version=torchaudio,
        min_driver=str(full_min) if full_min else None,
        min_driver_compat=str(compat_min) if compat_min else None,
        driver_mode=mode,
        status=status,
        platform=platform,
        notes=tuple(notes),
        sources=sources,
    )

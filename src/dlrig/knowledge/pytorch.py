"""PyTorch releases: their CUDA wheel variants, compiled architectures, and companions."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from dlrig.knowledge.cuda import first_cuda_for, variant_cuda
from dlrig.knowledge.tables import record, records, rows, split_list
from dlrig.knowledge.versions import Version, minor_of, release


@dataclass(frozen=True)
class ArchList:
    torch_version: str  # "2.5"
    cuda_variant: str  # "cu124"
    compute_capabilities: tuple[str, ...]  # ("5.0", "6.0", ...)
    ptx: str | None  # PTX shipped for this capability, or None
    platform: str
    confidence: str
    source: str

    def supports(self, compute_capability: str) -> bool:
        """Whether a GPU of this capability can run the build's kernels.

        Cubins run on GPUs of the same major version with an equal or higher minor (8.0 code
        runs on 8.6); PTX is JIT-compiled for any newer GPU.
        """
        wanted = Version.parse(compute_capability)
        if wanted is None:
            return False
        for capability in self.compute_capabilities:
            have = Version.parse(capability)
            if have is not None and have.major == wanted.major and have.minor <= wanted.minor:
                return True
        if self.ptx:
            ptx = Version.parse(self.ptx)
            if ptx is None or wanted < ptx:
                return False
            needed = first_cuda_for(f"{wanted.major}.{wanted.minor}")
            built = variant_cuda(self.cuda_variant)
            return needed is None or built is None or built >= needed
        return False


def _expand(raw: str) -> list[str]:
    """ "2.12-2.14" -> ["2.12", "2.13", "2.14"]; "2.5" -> ["2.5"]."""
    if "-" not in raw:
        return [raw]
    start, end = raw.split("-", 1)
    first, last = Version.parse(start), Version.parse(end)
    if first is None or last is None or first.major != last.major:
        return [raw]
    return [f"{first.major}.{minor}" for minor in range(first.minor, last.minor + 1)]


@functools.cache
def arch_lists() -> tuple[ArchList, ...]:
    return tuple(
        record(
            "pytorch_arch_lists",
            ArchList,
            row,
            torch_version=torch_version,
            compute_capabilities=split_list(row["arch_list"]),
            ptx=row["ptx_arch"] or None,
        )
        for row in rows("pytorch_arch_lists")
        for torch_version in _expand(row["torch_version"])
    )


@functools.cache
def _arch_index() -> dict[tuple[str, str, str], ArchList]:
    index: dict[tuple[str, str, str], ArchList] = {}
    for entry in arch_lists():
        index.setdefault((entry.torch_version, entry.cuda_variant, entry.platform), entry)
    return index


def arch_list(
    torch_version: str, cuda_variant: str, platform: str = "linux-x86_64"
) -> ArchList | None:
    minor = minor_of(torch_version)
    return _arch_index().get((minor or "", cuda_variant, platform))


def variants_supporting(compute_capability: str, platform: str = "linux-x86_64") -> list[ArchList]:
    """Every (release, variant) whose wheels run on this GPU, newest release first."""
    matching = [
        e for e in arch_lists() if e.platform == platform and e.supports(compute_capability)
    ]
    return sorted(
        matching,
        key=lambda e: (Version.parse(e.torch_version) or Version((0,)), e.cuda_variant),
        reverse=True,
    )


@dataclass(frozen=True)
class CudaVariant:
    torch_version: str  # the minor, "2.5"
    cuda_variant: str
    cuda_version: str
    status: str
    source: str
    # Patch releases that shipped this variant ("1.8.1"); empty = every patch of the minor.
    releases: tuple[str, ...] = ()

    def shipped_in(self, torch_version: str) -> bool:
        """Whether this variant exists for that release ("1.8.0" has no cu101 wheel)."""
        if minor_of(torch_version) != self.torch_version:
            return False
        wanted = Version.parse(release(torch_version))
        if not self.releases or wanted is None or len(wanted.parts) < 3:
            return True
        return any(Version.parse(r) == wanted.padded(3) for r in self.releases)


@functools.cache
def cuda_variants() -> tuple[CudaVariant, ...]:
    return records("pytorch_cuda_variants", CudaVariant)


def variant_for_cuda(torch_version: str, cuda: str) -> str | None:
    """The wheel variant name ("cu121") of a torch release built for CUDA `cuda` ("12.1")."""
    minor = minor_of(torch_version)
    wanted = Version.parse(cuda)
    if wanted is None:
        return None
    for variant in cuda_variants():
        have = Version.parse(variant.cuda_version)
        if (
            variant.torch_version == minor
            and have is not None
            and have.truncated(2) == wanted.truncated(2)
        ):
            return variant.cuda_variant
    return f"cu{wanted.major}{wanted.minor}"


def variants_of(torch_version: str) -> tuple[CudaVariant, ...]:
    """The CUDA wheel variants that exist for this release (patch-exact where the table says)."""
    return tuple(v for v in cuda_variants() if v.shipped_in(torch_version))


def releases() -> tuple[str, ...]:
    """Every torch minor the variant table knows, oldest first."""
    minors = {v.torch_version for v in cuda_variants()}
    return tuple(sorted(minors, key=lambda m: Version.parse(m) or Version((0,))))


@dataclass(frozen=True)
class Companions:
    torch_version: str
    torchvision_version: str | None
    torchaudio_version: str | None
    source: str
    # Exact torchvision releases, where two torch minors share one torchvision minor (0.4).
    torchvision_releases: tuple[str, ...] = ()


@functools.cache
def companions() -> dict[str, Companions]:
    return {entry.torch_version: entry for entry in records("torch_companions", Companions)}


def torch_for_torchvision(torchvision_version: str) -> str | None:
    minor = minor_of(torchvision_version)
    exact = Version.parse(release(torchvision_version))
    candidates = [e for e in companions().values() if e.torchvision_version == minor]
    for entry in candidates:
        if exact is not None and any(
            Version.parse(r) == exact.padded(3) for r in entry.torchvision_releases
        ):
            return entry.torch_version
    # Without an exact match, a shared minor (0.4 = torch 1.2 or 1.3) names no single torch.
    plain = [e for e in candidates if not e.torchvision_releases]
    if plain:
        return plain[0].torch_version
    return candidates[0].torch_version if len(candidates) == 1 else None


def torch_for_torchaudio(torchaudio_version: str) -> str | None:
    minor = minor_of(torchaudio_version)
    for entry in companions().values():
        if entry.torchaudio_version == minor:
            return entry.torch_version
    return None


@functools.cache
def compile_python_support() -> dict[str, str]:
    """Python version -> the first torch release whose torch.compile supports it."""
    return {row["python"]: row["torch_min"] for row in rows("torch_compile_python")}

"""AMD ROCm: which gfx targets each PyTorch ROCm wheel carries, and what each gfx target is.

A ROCm wheel holds code objects for a list of GPU ISAs (`PYTORCH_ROCM_ARCH` at build time);
on a GPU whose ISA is not in it every kernel fails with "HIP error: invalid device function"
or "hipErrorNoBinaryForGpu". `pytorch_rocm_builds.csv` lists the variants each release shipped
and, where sourced, their ISAs; `amd_gfx_targets.csv` names the products of each ISA and the
override users report working for consumer cards AMD does not support.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from dlrig.knowledge.tables import records
from dlrig.knowledge.versions import Version

_GFX = re.compile(r"\bgfx[0-9a-f]{3,4}\b", re.IGNORECASE)


@dataclass(frozen=True)
class RocmBuild:
    torch_version: str  # the release's major.minor, "2.3"; "main" = the newest build script
    rocm_variant: str  # "rocm6.0": the local version tag and index folder
    rocm_version: str
    arch_list: str  # ";"-separated gfx targets, "" when not sourced
    source: str
    as_of: str

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(filter(None, self.arch_list.split(";")))


@dataclass(frozen=True)
class GfxTarget:
    gfx_target: str
    family: str
    products: str  # ";"-separated names as AMD and users write them
    override: str  # HSA_OVERRIDE_GFX_VERSION users report working; "" = none known
    source: str
    as_of: str


@functools.cache
def builds() -> tuple[RocmBuild, ...]:
    return records("pytorch_rocm_builds", RocmBuild)


@functools.cache
def gfx_targets() -> tuple[GfxTarget, ...]:
    return records("amd_gfx_targets", GfxTarget)


def base_target(text: str | None) -> str | None:
    """ "gfx90a" from "gfx90a:sramecc+:xnack-", an amd-smi/rocminfo name or a GPU line."""
    match = _GFX.search(text or "")
    return match.group(0).lower() if match else None


def target_info(gfx: str) -> GfxTarget | None:
    return next((t for t in gfx_targets() if t.gfx_target == gfx), None)


def target_of(gfx_target: str | None, name: str) -> str | None:
    """A GPU's gfx target: the one its tool reported, else its product's (from the table)."""
    return base_target(gfx_target) or target_for_product(name)


def newest_build(rocm_version: str | None = None) -> RocmBuild:
    """The newest release's ROCm build, for the installed ROCm's major version when known."""
    rows = [b for b in builds() if b.rocm_variant]
    wanted = Version.parse(rocm_version) if rocm_version else None
    if wanted is not None:
        same = [b for b in rows if (v := Version.parse(b.rocm_version)) and v.major == wanted.major]
        rows = same or rows
    return rows[-1]


def target_for_product(name: str) -> str | None:
    """The gfx target of a product name ("AMD Instinct MI210" -> "gfx90a"), or None."""
    words = re.sub(r"[^a-z0-9]+", " ", name.lower()).split()
    for target in gfx_targets():
        for product in filter(None, target.products.split(";")):
            wanted = re.sub(r"[^a-z0-9]+", " ", product.lower()).split()
            if any(words[i : i + len(wanted)] == wanted for i in range(len(words))):
                return target.gfx_target
    return None


def _minor(version: str) -> str | None:
    parsed = Version.parse(version)
    return None if parsed is None else f"{parsed.major}.{parsed.minor}"


def build_for(torch_version: str, rocm_variant: str | None) -> RocmBuild | None:
    """The table's row for a torch release and its ROCm variant ("rocm6.0"); with no variant,
    the release's only ROCm build if it shipped one."""
    minor = _minor(torch_version)
    if minor is None:
        return None
    rows = [b for b in builds() if b.torch_version == minor]
    if rocm_variant:
        rows = [b for b in rows if b.rocm_variant == rocm_variant]
    return rows[0] if len(rows) == 1 else None


def complete_for(minor: str) -> bool:
    """Whether the table lists every ROCm variant of a release: the wheel commands of the
    previous-versions page do (1.8 to 2.3); RELEASE.md names only the stable one (2.4 on), and
    several releases shipped two (2.5: rocm6.1 and rocm6.2)."""
    return any(b.torch_version == minor and "previous-versions" in b.source for b in builds())


def choose_build(variant: str, torch_version: str | None) -> RocmBuild:
    """The ROCm wheel build for a variant ("rocm6.2") and, when given, a torch release; raises
    LookupError naming what exists (an unknown ROCm version, or a release that never shipped it)."""
    rows = [b for b in builds() if b.rocm_variant == variant]
    if not rows:
        shipped = ", ".join(dict.fromkeys(b.rocm_variant for b in builds() if b.rocm_variant))
        raise LookupError(f"no PyTorch release shipped a {variant} wheel (ROCm wheels: {shipped})")
    if torch_version is not None:
        minor = _minor(torch_version)
        same = [b for b in rows if b.torch_version == minor]
        if not same:
            other = ", ".join(b.rocm_variant for b in builds() if b.torch_version == minor)
            if minor is not None and not complete_for(minor):
                raise LookupError(
                    f"dlrig's table knows only the stable ROCm wheel of torch {minor} ({other}); "
                    f"whether it shipped {variant} is not known here"
                )
            raise LookupError(
                f"torch {minor} never shipped a {variant} wheel"
                + (f" (it shipped {other})" if other else " (no ROCm wheel of it is known)")
            )
        return same[-1]
    return rows[-1]


def official_targets() -> frozenset[str]:
    """Every gfx target any official PyTorch ROCm wheel may carry: the sourced lists and the
    newest build script's. A target outside it is in no wheel of download.pytorch.org."""
    return frozenset(t for b in builds() for t in b.targets)

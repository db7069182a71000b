"""The GPU catalogue: canonical ids, how nvidia-smi and users spell each GPU, and its peaks.

Resolution is by token set, so word order and punctuation do not matter:
"NVIDIA A100-SXM4-80GB", "A100 80GB SXM4" and "a100-sxm4-80gb" are the same tokens
{a100, sxm4, 80gb}. Vendor words ("NVIDIA", "GeForce", "Tesla") are dropped before comparing.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass

from dlrig.knowledge.tables import KnowledgeError, optional_float, optional_int, rows

_NOISE_WORDS = frozenset({"nvidia", "geforce", "tesla", "amd", "instinct", "habana", "intel"})
_TOKEN = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class GpuSpec:
    id: str
    vendor: str
    name: str
    aliases: tuple[str, ...]
    architecture: str
    compute_capability: str | None
    memory_gb: float | None
    nvidia_smi_memory_mib: int | None
    memory_bandwidth_gbs: float | None
    fp32_tflops: float | None
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    fp8_tflops: float | None
    tdp_watts: float | None
    nvlink_gbs: float | None
    pcie_gen: int | None
    pcie_lanes: int | None
    form_factor: str
    source: str
    as_of: str

    @property
    def memory_bytes(self) -> int | None:
        """Usable device memory: what nvidia-smi reports where known, else the marketed GiB."""
        if self.nvidia_smi_memory_mib is not None:
            return self.nvidia_smi_memory_mib * 1024**2
        if self.memory_gb is not None:
            return int(self.memory_gb * 1024**3)
        return None

    def peak_tflops(self, precision: str) -> float | None:
        """Dense peak for "fp32", "tf32", "fp16", "bf16" or "fp8"."""
        value: float | None = {
            "fp32": self.fp32_tflops,
            "tf32": self.tf32_tflops,
            "fp16": self.fp16_tflops,
            "bf16": self.bf16_tflops,
            "fp8": self.fp8_tflops,
        }.get(precision)
        return value

    @property
    def has_nvlink(self) -> bool:
        return bool(self.nvlink_gbs) and self.form_factor in {"sxm", "oam", "mezzanine"}


def tokens(name: str) -> frozenset[str]:
    """The comparable tokens of a GPU name ("80 GB" is folded into "80gb")."""
    lowered = name.lower().replace("-", " ").replace("_", " ")
    lowered = re.sub(r"(\d+)\s*gb\b", r"\1gb", lowered)
    return frozenset(t for t in _TOKEN.findall(lowered) if t not in _NOISE_WORDS)


class Catalogue:
    def __init__(self, specs: tuple[GpuSpec, ...]) -> None:
        self.specs = specs
        self._by_id = {spec.id: spec for spec in specs}
        self._by_tokens: dict[frozenset[str], GpuSpec] = {}
        for spec in specs:
            for spelling in (spec.id, spec.name, *spec.aliases):
                key = tokens(spelling)
                if not key:
                    continue
                other = self._by_tokens.get(key)
                if other is not None and other.id != spec.id:
                    raise KnowledgeError(
                        f"GPU catalogue: spelling {spelling!r} is ambiguous ({other.id}, {spec.id})"
                    )
                self._by_tokens[key] = spec

    def get(self, gpu_id: str) -> GpuSpec | None:
        return self._by_id.get(gpu_id)

    def resolve(self, name: str) -> GpuSpec | None:
        """The spec for an id, a catalogue alias or an nvidia-smi product name."""
        if name in self._by_id:
            return self._by_id[name]
        # MIG devices are named after their parent: "NVIDIA H100 80GB HBM3 MIG 1g.10gb".
        name = re.sub(r"\s+MIG\s+\d+g\.\d+gb\b.*$", "", name, flags=re.I)
        key = tokens(name)
        if key in self._by_tokens:
            return self._by_tokens[key]
        # Some drivers append the memory type ("HBM3"): accept the spelling without it.
        qualifiers = {t for t in key if t.startswith("hbm")}
        stripped = frozenset(key - qualifiers)
        if stripped != key and stripped in self._by_tokens:
            return self._by_tokens[stripped]
        return None

    def suggestions(self, name: str, limit: int = 3) -> list[str]:
        """Nearest ids for an unknown name, for "did you mean" messages."""
        lowered = name.lower()
        ids = list(self._by_id)
        # "h100" should suggest every H100 variant before anything merely similar.
        containing = [i for i in ids if lowered and lowered in i]
        if containing:
            return containing[:limit]
        close = difflib.get_close_matches(lowered, ids, n=limit, cutoff=0.4)
        if close:
            return close
        wanted = tokens(name)
        scored = sorted(ids, key=lambda i: -len(wanted & tokens(i)))
        return [i for i in scored[:limit] if wanted & tokens(i)]


def _spec(row: dict[str, str]) -> GpuSpec:
    return GpuSpec(
        id=row["id"],
        vendor=row["vendor"],
        name=row["name"],
        aliases=tuple(a.strip() for a in row["aliases"].split(";") if a.strip()),
        architecture=row["architecture"],
        compute_capability=row["compute_capability"] or None,
        memory_gb=optional_float(row["memory_gb"]),
        nvidia_smi_memory_mib=optional_int(row["nvidia_smi_memory_mib"]),
        memory_bandwidth_gbs=optional_float(row["memory_bandwidth_gbs"]),
        fp32_tflops=optional_float(row["fp32_tflops"]),
        tf32_tflops=optional_float(row["tf32_tflops"]),
        fp16_tflops=optional_float(row["fp16_tflops"]),
        bf16_tflops=optional_float(row["bf16_tflops"]),
        fp8_tflops=optional_float(row["fp8_tflops"]),
        tdp_watts=optional_float(row["tdp_watts"]),
        nvlink_gbs=optional_float(row["nvlink_gbs"]),
        pcie_gen=optional_int(row["pcie_gen"]),
        pcie_lanes=optional_int(row["pcie_lanes"]),
        form_factor=row["form_factor"],
        source=row["source"],
        as_of=row["as_of"],
    )


@functools.cache
def catalogue() -> Catalogue:
    return Catalogue(tuple(_spec(row) for row in rows("gpus")))


@dataclass(frozen=True)
class FamilyCapability:
    pattern: re.Pattern[str]
    compute_capability: str
    architecture: str
    source: str


@functools.cache
def _families() -> tuple[FamilyCapability, ...]:
    return tuple(
        FamilyCapability(
            pattern=re.compile(row["pattern"], re.I),
            compute_capability=row["compute_capability"],
            architecture=row["architecture"],
            source=row["source"],
        )
        for row in rows("gpu_compute_capability")
    )


def compute_capability(name: str) -> tuple[str | None, str | None]:
    """(compute capability, where it came from) for a device name; (None, None) when unknown.

    The catalogue answers first; NVIDIA's compute-capability table (by name pattern) covers
    the many consumer and older cards the catalogue does not list.
    """
    spec = catalogue().resolve(name)
    if spec is not None and spec.compute_capability:
        return spec.compute_capability, f"GPU catalogue ({spec.id})"
    lowered = name.lower().replace("geforce", " ").replace("nvidia", " ")
    for family in _families():
        if family.pattern.search(lowered):
            return family.compute_capability, family.source
    return None, None

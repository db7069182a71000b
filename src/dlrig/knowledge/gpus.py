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

from dlrig.errors import InputError
from dlrig.knowledge.tables import KnowledgeError, record, rows

_NOISE_WORDS = frozenset({"nvidia", "geforce", "tesla", "amd", "instinct", "habana", "intel"})
_TOKEN = re.compile(r"[a-z0-9]+")
_RUN = re.compile(r"[a-z]+|[0-9]+")


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
    # devices software sees on one board (the MI250X package: two GCDs, each its own device)
    devices: int
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
    """The comparable tokens of a GPU name ("80 GB" is folded into "80gb").

    Words are split where letters meet digits, because people type card names with and
    without the space ("rtx4090" is "rtx 4090", "3090ti" is "3090 ti"), except that a prefix
    of one or two letters stays with its number ("a100", "h100", "mi300", "l40": a bare "h" or
    "v" would match a stray letter of another name) and a size stays with its unit ("80gb").
    """
    lowered = name.lower().replace("-", " ").replace("_", " ")
    lowered = re.sub(r"(\d+)\s*gb\b", r"\1gb", lowered)
    found: list[str] = []
    for word in _TOKEN.findall(lowered):
        runs = _RUN.findall(word)
        i = 0
        while i < len(runs):
            run, following = runs[i], runs[i + 1] if i + 1 < len(runs) else ""
            after = runs[i + 2] if i + 2 < len(runs) else ""
            if following and (
                (run.isalpha() and len(run) <= 2 and following.isdigit() and after != "gb")
                or (run.isdigit() and following == "gb")
            ):
                found.append(run + following)
                i += 2
            else:
                found.append(run)
                i += 1
    return frozenset(t for t in found if t not in _NOISE_WORDS)


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

    @property
    def devices(self) -> tuple[GpuSpec, ...]:
        """The GPUs as software sees them: a board of several devices (the MI250X package) is
        its devices, which have rows of their own."""
        return tuple(spec for spec in self.specs if spec.devices == 1)

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
    # Aliases are written "a; b" in the table, so each one is stripped as well.
    aliases = tuple(a.strip() for a in row["aliases"].split(";") if a.strip())
    return record("gpus", GpuSpec, row, aliases=aliases)


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
    table = "gpu_compute_capability"
    return tuple(
        record(table, FamilyCapability, row, pattern=re.compile(row["pattern"], re.I))
        for row in rows(table)
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


# --- the one lookup for a GPU model the user names (--gpu) ---------------------------------


@dataclass(frozen=True)
class GpuPreference:
    alias: str
    gpu: str
    reason: str
    source: str


@functools.cache
def alias_preferences() -> dict[frozenset[str], GpuPreference]:
    """Short names that fit several SKUs (gpu_alias_preference.csv), by their token set."""
    found: dict[frozenset[str], GpuPreference] = {}
    for row in rows("gpu_alias_preference"):
        if catalogue().get(row["gpu"]) is None:
            raise KnowledgeError(f"gpu_alias_preference: {row['gpu']} is not a catalogue id")
        found[tokens(row["alias"])] = record("gpu_alias_preference", GpuPreference, row)
    return found


@dataclass(frozen=True)
class GpuMatch:
    """What `lookup` found and how: by id, by a catalogue spelling, or by a preference row."""

    spec: GpuSpec
    how: str  # id | alias | preferred
    note: str | None = None  # for "preferred": which SKU was taken, why, and the others
    source: str | None = None


def _containing(name: str) -> list[GpuSpec]:
    """Catalogue entries one of whose spellings holds every token of `name`."""
    wanted = tokens(name)
    if not wanted:
        return []
    return [
        spec
        for spec in catalogue().specs
        if any(wanted <= tokens(s) for s in (spec.id, spec.name, *spec.aliases) if tokens(s))
    ]


def lookup(name: str, option: str = "--gpu") -> GpuMatch:
    """The catalogue GPU a user means by `name`; the ONE lookup every `--gpu` goes through.

    1. a catalogue id ("h100-sxm5-80gb"), case-insensitive;
    2. any spelling the catalogue lists for it (aliases, nvidia-smi names: "A100-SXM4-80GB",
       "NVIDIA H100 80GB HBM3", "RTX 4090"), word order and punctuation ignored;
    3. a short name several SKUs share ("h100", "a100 80gb"): the SKU gpu_alias_preference.csv
       names for it, with its reason;
    4. otherwise InputError: ambiguous (listing the SKUs it fits) or unknown (with suggestions).
    A partial name that fits one SKU only ("rtx 4080" -> rtx-4080-super) is not taken for it:
    it is offered as a suggestion, because the missing word may name another card.
    """
    text = name.strip()
    cat = catalogue()
    by_id = cat.get(text) or cat.get(text.lower())
    if by_id is not None:
        return GpuMatch(by_id, "id")
    spec = cat.resolve(text)
    if spec is not None:
        return GpuMatch(spec, "alias")
    preferred = alias_preferences().get(tokens(text))
    if preferred is not None:
        chosen = cat.get(preferred.gpu)
        assert chosen is not None  # checked when the table is loaded
        others = [s.id for s in _containing(text) if s.id != chosen.id]
        note = f"{option} {text} taken as {chosen.id}: {preferred.reason}"
        if others:
            note += f" (name another SKU to override: {', '.join(others)})"
        return GpuMatch(chosen, "preferred", note, preferred.source)
    fitting = _containing(text)
    if len(fitting) > 1:
        ids = ", ".join(s.id for s in fitting)
        raise InputError(
            f"{option} {text}: matches several different GPUs in the catalogue ({ids})",
            fix=f"name one of them, e.g. {option} {fitting[0].id}",
        )
    close = [s.id for s in fitting] or cat.suggestions(text)
    raise InputError(
        f"{option} {text}: not in the GPU catalogue",
        fix=("did you mean " + ", ".join(close) + "? " if close else "")
        + "list them with: dlrig fit --list-gpus",
    )

"""The target GPU: a catalogue model named by id or any alias, and the precisions it really has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlrig.errors import InputError
from dlrig.knowledge.gpus import GpuSpec, catalogue, tokens


@dataclass(frozen=True)
class Target:
    spec: GpuSpec
    memory_bytes: int
    origin: str  # "--gpu a100 (the largest A100 …)", "this machine (…)"


def _spellings(spec: GpuSpec) -> list[frozenset[str]]:
    return [tokens(s) for s in (spec.id, spec.name, *spec.aliases) if tokens(s)]


def resolve_model(name: str) -> tuple[GpuSpec, str]:
    """A catalogue spec for an id, an alias, or a partial name such as "a100" or "H100".

    A partial name that several catalogue entries contain resolves when they are variants of
    one chip (same vendor and architecture): the largest memory wins, then SXM over PCIe, and the
    answer says which was taken and what the others are. Names that span chips are refused with
    the candidates.
    """
    cat = catalogue()
    spec = cat.resolve(name)
    if spec is not None:
        return spec, f"--gpu {name}"
    wanted = tokens(name)
    if not wanted:
        raise InputError(f"--gpu {name!r}: not a GPU name", fix="see `dlrig fit --list-gpus`")
    candidates = [s for s in cat.specs if any(wanted <= spelling for spelling in _spellings(s))]
    if not candidates:
        close = cat.suggestions(name)
        raise InputError(
            f"--gpu {name!r}: not in the GPU catalogue",
            fix=("did you mean " + ", ".join(close) + "? " if close else "")
            + "see `dlrig fit --list-gpus`",
        )
    if len(candidates) == 1:
        return candidates[0], f"--gpu {name}"
    chips = {(s.vendor, s.architecture) for s in candidates}
    ids = ", ".join(s.id for s in candidates)
    if len(chips) > 1:
        raise InputError(
            f"--gpu {name!r} matches several different GPUs: {ids}",
            fix="name one of them, e.g. --gpu " + candidates[0].id,
        )
    form_rank = {"sxm": 0, "oam": 0, "mezzanine": 0, "nvl": 1, "pcie": 2}
    best = sorted(
        candidates,
        key=lambda s: (-(s.memory_bytes or 0), form_rank.get(s.form_factor, 3), s.id),
    )[0]
    others = ", ".join(s.id for s in candidates if s is not best)
    return best, f"--gpu {name} taken as {best.id} (largest memory of {others} and it)"


def target(gpu: str | GpuSpec | None, machine: Any = None) -> Target:
    """The GPU to estimate for: --gpu, else this machine's first GPU."""
    if isinstance(gpu, GpuSpec):
        memory = gpu.memory_bytes
        if memory is None:
            raise InputError(f"GPU {gpu.id}: the catalogue has no memory size for it")
        return Target(gpu, memory, "given spec")
    if gpu:
        spec, origin = resolve_model(gpu)
        if spec.memory_bytes is None:
            raise InputError(f"GPU {spec.id}: the catalogue has no memory size for it")
        return Target(spec, spec.memory_bytes, origin)
    if machine is not None and getattr(machine, "gpus", None):
        found = machine.gpus[0]
        local = catalogue().resolve(found.name)
        if local is None:
            raise InputError(
                f"this machine's GPU {found.name!r} is not in the GPU catalogue",
                fix="pass --gpu with the nearest catalogue id (see `dlrig fit --list-gpus`)",
            )
        memory = found.memory_total_bytes or local.memory_bytes
        assert memory is not None
        return Target(local, memory, f"this machine ({found.name})")
    raise InputError(
        "no GPU on this machine to estimate for",
        fix="name the target GPU: --gpu h100-sxm5-80gb (see `dlrig fit --list-gpus`)",
    )


# precision -> the dtype its matmuls run in
COMPUTE = {"fp32": "fp32", "tf32": "tf32", "amp-fp16": "fp16", "amp-bf16": "bf16", "bf16": "bf16"}


def has(spec: GpuSpec, dtype: str) -> bool:
    return bool(spec.peak_tflops(dtype))


def resolve_precision(requested: str, spec: GpuSpec) -> tuple[str, str]:
    """(precision, why) for the GPU. "auto" picks what the GPU does best; a precision the
    architecture lacks is refused (bf16 before Ampere runs emulated, far below any peak)."""
    if requested == "auto":
        if has(spec, "bf16"):
            return "amp-bf16", f"default: bf16 autocast ({spec.id} has bf16 tensor cores)"
        if has(spec, "fp16"):
            return "amp-fp16", f"default: fp16 autocast with loss scaling ({spec.id} has no bf16)"
        return "amp-fp16", (
            f"default: fp16 autocast for its memory savings ({spec.id} has no fp16/bf16 "
            "tensor cores: its matmuls are timed at the fp32 peak)"
        )
    dtype = COMPUTE[requested]
    if dtype in ("bf16", "tf32") and not has(spec, dtype):
        better = "amp-fp16" if has(spec, "fp16") else "fp32"
        raise InputError(
            f"--precision {requested}: {spec.id} ({spec.architecture}) has no {dtype} hardware",
            fix=f"use --precision {better} (or leave --precision out to get the GPU's best)",
        )
    return requested, f"--precision {requested}"


def resolve_weights(requested: str | None, spec: GpuSpec) -> tuple[str, str]:
    """Inference weight format for the GPU; fp8 needs fp8 tensor cores (Ada, Hopper, newer)."""
    if requested is None:
        if has(spec, "bf16"):
            return "bf16", "default: bf16 weights"
        return "fp16", f"default: fp16 weights ({spec.id} has no bf16)"
    if requested == "fp8" and not has(spec, "fp8"):
        raise InputError(
            f"--weights fp8: {spec.id} ({spec.architecture}) has no fp8 tensor cores",
            fix="use --weights int8 or int4 (weight-only), or bf16/fp16",
        )
    if requested == "bf16" and not has(spec, "bf16"):
        raise InputError(
            f"--weights bf16: {spec.id} ({spec.architecture}) has no bf16 hardware",
            fix="use --weights fp16",
        )
    return requested, f"--weights {requested}"


def peak_tflops(spec: GpuSpec, precision: str) -> float:
    """Dense peak of the precision's matmul dtype (never a peak the GPU lacks)."""
    value = spec.peak_tflops(COMPUTE[precision])
    if not value:
        value = spec.fp32_tflops or spec.bf16_tflops or 1.0
    return float(value)

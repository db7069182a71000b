"""The target GPU: a catalogue model named by id or any alias, and the precisions it really has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlrig.errors import InputError
from dlrig.knowledge.gpus import GpuSpec, catalogue, lookup


@dataclass(frozen=True)
class Target:
    spec: GpuSpec
    memory_bytes: int
    origin: str  # "--gpu a100 (the largest A100 …)", "this machine (…)"


def resolve_model(name: str) -> tuple[GpuSpec, str]:
    """A catalogue spec for an id, an alias, or a short name such as "a100" or "H100".

    The one lookup every `--gpu` goes through (`knowledge.gpus.lookup`): a short name several
    SKUs share takes the SKU gpu_alias_preference.csv names, and the origin says so and why.
    """
    match = lookup(name)
    return match.spec, match.note or f"--gpu {name}"


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
        if spec.devices > 1:
            # a model runs on a device, and this board is several (the MI250X's two GCDs)
            # the board's own device row: its id is the board's without the suffix
            # (mi250x-oam -> mi250x)
            one = next(
                (
                    s.id
                    for s in catalogue().devices
                    if spec.id.startswith(s.id + "-")
                    and s.memory_gb == (spec.memory_gb or 0) / spec.devices
                ),
                None,
            )
            raise InputError(
                f"--gpu {gpu}: {spec.id} is a board of {spec.devices} devices, and PyTorch sees "
                "each as a GPU of its own",
                fix=(f"use --gpu {one} " if one else "name the device ")
                + f"with --gpus {spec.devices} per board",
            )
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
COMPUTE = {
    "fp32": "fp32",
    "tf32": "tf32",
    "amp-fp16": "fp16",
    "amp-bf16": "bf16",
    "bf16": "bf16",
    "fp16": "fp16",
}


def has(spec: GpuSpec, dtype: str) -> bool:
    return bool(spec.peak_tflops(dtype))


def resolve_precision(
    requested: str, spec: GpuSpec, traced: str | None = None, sharded: bool = False
) -> tuple[str, str]:
    """(precision, why) for the GPU. "auto" picks what people run: a causal LM fine-tuned from
    a 16-bit checkpoint (traced "bf16") keeps bf16 weights where the GPU has bf16, on one GPU or
    with DDP; sharded over several GPUs (`sharded`: FSDP or ZeRO, full fine-tune) its trainable
    weights become fp32 masters; anything else trains with autocast over fp32 master weights,
    bf16 where the GPU has it, else fp16. A precision the architecture lacks is refused (bf16
    before Ampere runs emulated)."""
    if requested == "auto" and sharded and has(spec, "bf16"):
        # Accelerate's prepare_model upcasts every trainable FSDP flat parameter that is not
        # fp32 ("Upcasted low precision parameters ... because mixed precision turned on in
        # FSDP", to mimic DeepSpeed), and DeepSpeed's bf16/fp16 ZeRO optimizers keep fp32
        # partitions of the weights: Trainer and Accelerate shard fp32 masters either way.
        return "amp-bf16", (
            "default for FSDP/ZeRO: fp32 master weights sharded with bf16 compute, as "
            "Accelerate (and so Trainer) upcasts trainable FSDP parameters and DeepSpeed keeps "
            "fp32 partitions; --precision bf16 for pure bf16 shards (torchtitan, FSDP2 by hand)"
        )
    if requested == "auto" and traced == "bf16":
        if has(spec, "bf16"):
            return "bf16", (
                "default for a causal LM fine-tuned from a checkpoint stored in 16 bits: bf16 "
                "weights, gradients and optimizer state, as from_pretrained(torch_dtype='auto') "
                "with Trainer(bf16=True) runs it; --precision amp-bf16 for fp32 master weights"
            )
        return "amp-fp16", (
            f"default: {spec.id} has no bf16, so the 16-bit checkpoint trains with fp16 "
            "autocast over fp32 master weights and loss scaling (pure fp16 training is unstable)"
        )
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

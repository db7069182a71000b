"""What the user asked for, checked before anything is built.

`Options` holds every question `dlrig fit` answers. The *workload* fields (model, batch, sequence,
precision, optimizer, checkpointing, PEFT) decide the trace; the *cluster* fields (GPU, count,
strategy, network) only decide how the trace is evaluated, so `fit.evaluate` can reuse one trace
for many GPUs.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, fields
from typing import Literal, TypedDict

from dlrig.errors import InputError
from dlrig.fit.combinations import check_combinations, flag_of
from dlrig.knowledge.weight_formats import bits_per_weight

# Each vocabulary is a Literal (what mypy checks) and its tuple (what --help and the checks
# of user input list), one made from the other.
Precision = Literal["auto", "fp32", "tf32", "amp-fp16", "amp-bf16", "bf16", "fp16"]
PRECISIONS: tuple[Precision, ...] = typing.get_args(Precision)
Optimizer = Literal[
    "sgd",
    "sgd-momentum",
    "adam",
    "adamw",
    "adafactor",
    "adamw-8bit",
    # bitsandbytes' paged AdamW (32-bit and 8-bit state): the state lives in CUDA unified
    # memory and pages to the host when the GPU runs short (QLoRA's paged_adamw_*)
    "paged-adamw",
    "paged-adamw-8bit",
]
OPTIMIZERS: tuple[Optimizer, ...] = typing.get_args(Optimizer)
# bitsandbytes' AdamW family: one fp32 AdamW step is traced for each (its state is sized here)
BNB_ADAMW: tuple[Optimizer, ...] = ("adamw-8bit", "paged-adamw", "paged-adamw-8bit")
Strategy = Literal["ddp", "zero1", "zero2", "zero3", "fsdp", "hsdp", "fsdp-grad-op"]
STRATEGIES: tuple[Strategy, ...] = typing.get_args(Strategy)
Checkpointing = Literal["none", "full", "selective"]
CHECKPOINTING: tuple[Checkpointing, ...] = typing.get_args(Checkpointing)
Offload = Literal["none", "optimizer", "params"]
OFFLOAD: tuple[Offload, ...] = typing.get_args(Offload)
WeightFormat = Literal["bf16", "fp16", "fp8", "int8", "int4"]
WEIGHT_FORMATS: tuple[WeightFormat, ...] = typing.get_args(WeightFormat)
Engine = Literal["graphs", "eager"]
ENGINES: tuple[Engine, ...] = typing.get_args(Engine)
Attention = Literal["sdpa", "eager"]
ATTENTION: tuple[Attention, ...] = typing.get_args(Attention)
Activations = Literal["model", "fused", "liger"]
ACTIVATIONS: tuple[Activations, ...] = typing.get_args(Activations)
# torch.optim's step implementations: one multi-tensor kernel per op over every parameter (the
# CUDA default; its temporaries are parameter-sized), a Python loop per parameter (foreach=False,
# transformers' own AdamW before 4.29), or fused=True (one kernel, no temporaries)
OptimizerImpl = Literal["foreach", "for-loop", "fused"]
OPTIMIZER_IMPLS: tuple[OptimizerImpl, ...] = typing.get_args(OptimizerImpl)
Interconnect = Literal["nvlink", "pcie"]
Compile = Literal["none", "model", "blocks"]
COMPILES: tuple[Compile, ...] = typing.get_args(Compile)
PipelineSchedule = Literal["1f1b", "interleaved-1f1b", "gpipe"]
PP_SCHEDULES: tuple[PipelineSchedule, ...] = typing.get_args(PipelineSchedule)

# Fields that change the trace; everything else is evaluation.
WORKLOAD_FIELDS = (
    "model",
    "config",
    "batch_size",
    "seq_len",
    "image_size",
    "precision",
    "optimizer",
    "grad_checkpointing",
    "checkpoint_blocks",
    "lora",
    "qlora",
    "lora_alpha",
    "lora_dropout",
    "lora_targets",
    "modules_to_save",
    "kbit_prepare",
    "double_quant",
    "attention",
    "activations",
    "optimizer_impl",
    "input_spec",
    "inference",
    "weights",
    "context",
    "compile",
    "loss_chunks",
)


class SetupChanges(TypedDict, total=False):
    """What `fit.evaluate` may change of a traced workload without tracing it again: the
    Options fields that are not WORKLOAD_FIELDS, plus precision and optimizer (among those a
    trace serves). A test keeps this list equal to those fields."""

    precision: Precision
    optimizer: Optimizer
    grad_accum: int
    gpus: int
    strategy: Strategy
    gpu: str | None
    interconnect: Interconnect | None
    gpus_per_node: int
    network_gbps: float | None
    dataset_size: int | None
    epochs: float
    tokens: float | None
    global_batch: int | None
    search_max_batch: bool
    offload: Offload
    prefetch: int
    engine: Engine | None
    analytic: bool
    advise: bool
    channels_last: bool
    keep_grads: bool
    optimizer_in_backward: bool
    activation_offload: bool
    grad_sync: bool
    fsdp_mixed_units: bool
    fp8: bool
    tp: int
    pp: int
    cp: int
    pp_schedule: PipelineSchedule


# Beyond these a number is a typo, not a plan (and would overflow the time model's floats).
LIMITS = {
    "batch_size": (1, 1_000_000),
    "seq_len": (1, 10_000_000),
    "image_size": (8, 16_384),
    "grad_accum": (1, 100_000),
    "gpus": (1, 1_000_000),
    "gpus_per_node": (1, 256),
    "global_batch": (1, 1_000_000_000),
    "dataset_size": (1, 10**13),
    "lora": (1, 65_536),
    "qlora": (1, 65_536),
    "context": (1, 10_000_000),
    "prefetch": (0, 16),
    "loss_chunks": (0, 4096),
    "tp": (1, 1024),
    "pp": (1, 1024),
    "cp": (1, 1024),
}
FLOAT_LIMITS = {
    "epochs": (1e-6, 1e6),
    "tokens": (1.0, 1e16),
    "network_gbps": (0.1, 1e6),
    "lora_alpha": (1e-6, 1e6),
}


@dataclass(frozen=True)
class Options:
    model: str
    batch_size: int | None = None
    seq_len: int | None = None
    image_size: int | None = None
    precision: Precision = "auto"
    optimizer: Optimizer = "adamw"
    grad_checkpointing: Checkpointing = "none"
    # the fraction of the repeated blocks that "full" checkpoints, evenly spaced (fms-fsdp's
    # selective_checkpointing; 1/n about transformers' every_n_layers=n, torchtitan's "n")
    checkpoint_blocks: float = 1.0
    grad_accum: int = 1
    gpus: int = 1
    strategy: Strategy = "ddp"
    gpu: str | None = None
    interconnect: Interconnect | None = None
    gpus_per_node: int = 8
    network_gbps: float | None = None
    dataset_size: int | None = None
    epochs: float = 1.0
    tokens: float | None = None
    global_batch: int | None = None
    input_spec: str | None = None
    search_max_batch: bool = True
    config: str | None = None  # a config.json or a model folder
    lora: int | None = None  # LoRA rank
    qlora: int | None = None  # QLoRA rank (4-bit NF4 base)
    lora_alpha: float | None = None
    # dropout on the adapter's input (peft's default 0; LitGPT and many QLoRA recipes 0.05): it
    # keeps a mask and its own output for backward
    lora_dropout: float = 0.0
    lora_targets: str | None = None  # comma list or "all-linear"; default: peft's for the model
    modules_to_save: str | None = None  # peft modules_to_save: comma list trained in full
    offload: Offload = "none"
    prefetch: int = 1  # FSDP/ZeRO-3 units gathered ahead of the one computing
    inference: bool = False
    weights: WeightFormat | None = None  # inference weight format
    context: int | None = None  # inference: tokens per sequence (prompt + generated)
    engine: Engine | None = None  # inference: "graphs" (vLLM, TensorRT-LLM, llama.cpp) or "eager"
    analytic: bool = False
    advise: bool = True
    # QLoRA as peft's prepare_model_for_kbit_training leaves the model: the frozen weights that
    # are not quantised (embeddings, output head, norms) upcast to fp32 (False: LitGPT, torchtune)
    kbit_prepare: bool = True
    # QLoRA's absmaxes as 8-bit codes (bnb_4bit_use_double_quant=True, LitGPT's bnb.nf4-dq);
    # False: one fp32 absmax per 64 weights (LitGPT's bnb.nf4)
    double_quant: bool = True
    channels_last: bool = False  # convolution nets in NHWC (torch.channels_last) layout
    attention: Attention = "sdpa"  # "sdpa": fused kernels, transformers' default
    # "model": activations as the model file writes them (transformers' gelu_new is a chain of
    # elementwise ops, each keeping its input for backward); "fused": one kernel each, keeping
    # only its input (LitGPT's and torchtune's models, Liger, transformers' hub kernels);
    # "liger": those, and Liger's fused norms, rotary embedding and SwiGLU/GeGLU (fit/liger.py)
    activations: Activations = "model"
    optimizer_impl: OptimizerImpl = "foreach"  # torch.optim's step implementation
    # gradients stay allocated between steps: optimizer.zero_grad(set_to_none=False), the
    # default before PyTorch 2.0 (and of HF Trainer then); off: set to None, today's default
    keep_grads: bool = False
    # torchtune's optimizer_in_bwd: each parameter steps as its gradient is ready and the
    # gradient is freed at once (no gradient accumulation)
    optimizer_in_backward: bool = False
    # torchtune's enable_activation_offloading (OffloadActivations): the tensors saved for
    # backward go to pinned host memory on a side stream and come back for backward; the GPU
    # keeps the layer in flight and the one being fetched
    activation_offload: bool = False
    # FSDP2 accumulation: False keeps unsharded gradients over the micro-batches and
    # reduce-scatters once (set_requires_gradient_sync(False)); True reduces every micro-batch
    grad_sync: bool = True
    # FSDP1 units that hold frozen and trainable weights together (use_orig_params=True,
    # wrapped by block: Lightning's FSDPStrategy, accelerate's TRANSFORMER_BASED_WRAP): the
    # unit's gradient covers its frozen weights too, "equivalent to not freezing those
    # parameters" (PyTorch's FSDP docs). False: FSDP2, or adapters wrapped in their own units
    # (peft's fsdp_auto_wrap_policy, Answer.AI's fsdp_qlora)
    fsdp_mixed_units: bool = False
    # torch.compile (inductor): memory-bound operators fused, pointwise results recomputed in
    # backward instead of saved (fit/compiled.py). "model": the whole forward and loss (HF
    # Trainer's torch_compile); "blocks": each repeated block, head and loss eager (torchtitan)
    compile: Compile = "none"
    # torchtune's chunked cross-entropy: the output projection and the fp32 loss in this many
    # chunks of the sequence (its recipes use 8); 0 is the model's own loss
    loss_chunks: int = 0
    # Float8 training of the linear layers (torchao float8 with dynamic tensorwise scaling,
    # Transformer Engine): their matmuls at the GPU's FP8 tensor-core peak, plus the casts
    fp8: bool = False
    # model parallelism for training (fit/parallel.py): tensor parallel with sequence
    # parallelism, pipeline stages (--grad-accum micro-batches in flight), context parallel;
    # --gpus is their product times the data-parallel degree
    tp: int = 1
    pp: int = 1
    cp: int = 1
    pp_schedule: PipelineSchedule = "1f1b"

    @property
    def checkpointed_fraction(self) -> float:
        """The fraction of the repeated blocks checkpointing replays in the backward."""
        return self.checkpoint_blocks if self.grad_checkpointing == "full" else 0.0

    def workload_key(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in WORKLOAD_FIELDS)


def _choice(value: str, allowed: tuple[str, ...], flag: str) -> None:
    if value not in allowed:
        raise InputError(
            f"{flag} {value!r} is not one of {', '.join(allowed)}",
            fix=f"use {flag} {allowed[0]} (or another listed value)",
        )


def check(options: Options) -> None:
    """Reject what cannot be meant: one message naming the flag, what is wrong and the fix."""
    _choice(options.precision, PRECISIONS, "--precision")
    _choice(options.optimizer, OPTIMIZERS, "--optimizer")
    _choice(options.strategy, STRATEGIES, "--strategy")
    _choice(options.grad_checkpointing, CHECKPOINTING, "--grad-checkpointing")
    _choice(options.compile, COMPILES, "--compile")
    _choice(options.offload, OFFLOAD, "--offload")
    _choice(options.pp_schedule, PP_SCHEDULES, "--pp-schedule")
    known = options.weights is None or options.weights in WEIGHT_FORMATS
    if not known and bits_per_weight(options.weights or "") is None:
        raise InputError(
            f"--weights {options.weights!r} is not a weight format dlrig knows",
            fix="use one of " + ", ".join(WEIGHT_FORMATS) + ", a llama.cpp mix such as "
            "gguf-q4_k_m, or exl2-BITS (2.0-8.0, e.g. exl2-4.65)",
        )
    if options.engine is not None:
        _choice(options.engine, ENGINES, "--engine")
    _choice(options.attention, ATTENTION, "--attention")
    _choice(options.activations, ACTIVATIONS, "--activations")
    _choice(options.optimizer_impl, OPTIMIZER_IMPLS, "--optimizer-impl")
    for name, (low, high) in LIMITS.items():
        value = getattr(options, name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
            raise InputError(
                f"{flag_of(name)} {value!r} is out of range: it must be a whole number from {low:,} to {high:,}",
                fix=f"pass a {flag_of(name)} in that range",
            )
    for name, (flow, fhigh) in FLOAT_LIMITS.items():
        number = getattr(options, name)
        if number is None:
            continue
        if not math.isfinite(number) or not flow <= number <= fhigh:
            raise InputError(
                f"{flag_of(name)} {number!r} is out of range: it must be above 0 and at most {fhigh:g}",
                fix=f"pass a positive {flag_of(name)}",
            )
    if options.interconnect not in (None, "nvlink", "pcie"):
        raise InputError(
            f"--interconnect {options.interconnect!r} is not nvlink or pcie",
            fix="use nvlink or pcie",
        )
    check_combinations(options)


def replace_options(options: Options, **changes: object) -> Options:
    values = {f.name: getattr(options, f.name) for f in fields(options)}
    values.update(changes)
    return Options(**values)

"""`dlrig fit`: will this model train on this GPU, at which batch size, and how fast?

    from dlrig import fit
    result = fit.estimate("llama3-8b", gpu="h100-sxm5-80gb", seq_len=8192, batch_size=1,
                          precision="amp-bf16", grad_checkpointing="full")
    result.fits, result.memory.peak_bytes, result.max_batch_size, result.samples_per_s

Nothing is allocated and no GPU is needed: the real training step is traced on fake tensors
(see fit/trace.py) and turned into memory (fit/memory.py) and time (fit/timing.py).
"""

from __future__ import annotations

import contextlib
import functools
import math
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from dlrig.errors import InputError

SCHEMA_VERSION = 1
PRECISIONS = ("fp32", "tf32", "amp-fp16", "amp-bf16", "bf16")
OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw", "adafactor", "adamw-8bit")
STRATEGIES = ("ddp", "zero1", "zero2", "fsdp")
CHECKPOINTING = ("none", "full", "selective")


@dataclass(frozen=True)
class Options:
    model: str
    batch_size: int | None = None
    seq_len: int | None = None
    image_size: int | None = None
    precision: str = "amp-bf16"
    optimizer: str = "adamw"
    grad_checkpointing: str = "none"
    grad_accum: int = 1
    gpus: int = 1
    strategy: str = "ddp"
    gpu: str | None = None
    interconnect: str | None = None
    gpus_per_node: int = 8
    network_gbps: float | None = None
    dataset_size: int | None = None
    epochs: float = 1.0
    tokens: float | None = None
    global_batch: int | None = None
    input_spec: str | None = None
    search_max_batch: bool = True


@dataclass(frozen=True)
class FitResult:
    model: str
    method: str  # "trace" | "analytic"
    gpu: str
    gpu_memory_bytes: int
    params: int
    trainable_params: int
    batch_size: int
    seq_len: int | None
    image_size: int | None
    memory_peak_bytes: int
    memory_reserved_bytes: int | None
    memory_breakdown: dict[str, int]
    peak_phase: str | None
    fits: bool
    margin_bytes: int
    max_batch_size: int | None
    global_batch: dict[str, int] | None
    flops_per_step: float | None
    step_time_s: float | None
    samples_per_s: float | None
    tokens_per_s: float | None
    time_to_train_s: float | None
    mfu: float | None
    scaling_efficiency: float | None
    timing: dict[str, float]
    setup: dict[str, Any]
    assumptions: tuple[str, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.model,
            "method": self.method,
            "gpu": self.gpu,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "params": self.params,
            "trainable_params": self.trainable_params,
            "batch_size": self.batch_size,
            "seq_len": self.seq_len,
            "image_size": self.image_size,
            "memory": {
                "peak_bytes": self.memory_peak_bytes,
                "reserved_bytes": self.memory_reserved_bytes,
                "breakdown": self.memory_breakdown,
                "peak_phase": self.peak_phase,
            },
            "fits": self.fits,
            "margin_bytes": self.margin_bytes,
            "max_batch_size": self.max_batch_size,
            "global_batch": self.global_batch,
            "flops_per_step": self.flops_per_step,
            "step_time_s": self.step_time_s,
            "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "time_to_train_s": self.time_to_train_s,
            "mfu": self.mfu,
            "scaling_efficiency": self.scaling_efficiency,
            "timing": self.timing,
            "setup": self.setup,
            "assumptions": list(self.assumptions),
            "notes": list(self.notes),
        }


@functools.cache
def calibration() -> dict[str, Any]:
    text = (
        resources.files("dlrig.knowledge")
        .joinpath("data", "fit_calibration.toml")
        .read_text("utf-8")
    )
    return tomllib.loads(text)


def _check(options: Options) -> None:
    def choice(value: str, allowed: tuple[str, ...], flag: str) -> None:
        if value not in allowed:
            raise InputError(
                f"{flag} {value!r} is not one of {', '.join(allowed)}",
                fix=f"use {flag} {allowed[0]} (or another listed value)",
            )

    choice(options.precision, PRECISIONS, "--precision")
    choice(options.optimizer, OPTIMIZERS, "--optimizer")
    choice(options.strategy, STRATEGIES, "--strategy")
    choice(options.grad_checkpointing, CHECKPOINTING, "--grad-checkpointing")
    for name, value in (
        ("--batch-size", options.batch_size),
        ("--seq-len", options.seq_len),
        ("--image-size", options.image_size),
        ("--grad-accum", options.grad_accum),
        ("--gpus", options.gpus),
        ("--global-batch", options.global_batch),
    ):
        if value is not None and value < 1:
            raise InputError(
                f"{name} must be at least 1 (got {value})", fix=f"pass a positive {name}"
            )
    if options.interconnect not in (None, "nvlink", "pcie"):
        raise InputError(
            f"--interconnect {options.interconnect!r} is not nvlink or pcie",
            fix="use nvlink or pcie",
        )


def _resolve_gpu(options: Options, machine: Any) -> tuple[Any, int, str]:
    """The catalogue spec, the usable memory in bytes, and where the GPU choice came from."""
    from dlrig.knowledge import gpus as gpu_knowledge

    catalogue = gpu_knowledge.catalogue()
    if options.gpu:
        spec = catalogue.resolve(options.gpu)
        if spec is None:
            close = catalogue.suggestions(options.gpu)
            raise InputError(
                f"--gpu {options.gpu!r}: not in the GPU catalogue",
                fix=("did you mean " + ", ".join(close) + "? " if close else "")
                + "see `dlrig fit --list-gpus`",
            )
        memory = spec.memory_bytes
        assert memory is not None
        return spec, memory, "--gpu"
    if machine is not None and machine.gpus:
        gpu = machine.gpus[0]
        spec = catalogue.resolve(gpu.name)
        if spec is None:
            raise InputError(
                f"this machine's GPU {gpu.name!r} is not in the GPU catalogue",
                fix="pass --gpu with the nearest catalogue id",
            )
        memory = gpu.memory_total_bytes or spec.memory_bytes
        assert memory is not None
        return spec, memory, f"this machine ({gpu.name})"
    raise InputError(
        "no GPU on this machine to estimate for",
        fix="name the target GPU: --gpu h100-sxm5-80gb (see `dlrig fit --list-gpus`)",
    )


def _make_optimizer(name: str) -> Any:
    import torch

    def factory(params: list[Any]) -> Any:
        if name == "sgd":
            return torch.optim.SGD(params, lr=0.1, foreach=True)
        if name == "sgd-momentum":
            return torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=True)
        if name == "adam":
            return torch.optim.Adam(params, lr=1e-4, foreach=True)
        if name == "adamw":
            return torch.optim.AdamW(params, lr=1e-4, foreach=True)
        if name == "adafactor":
            from transformers.optimization import Adafactor

            return Adafactor(params, lr=1e-4, scale_parameter=False, relative_step=False)
        return None  # adamw-8bit: bitsandbytes state is modelled analytically

    return factory


def _selective_policy() -> Any:
    """torchtitan's op-level selective checkpointing: keep matmul (every other one) and
    attention outputs, recompute the rest."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = {
        torch.ops.aten.mm.default,
        torch.ops.aten.addmm.default,
        torch.ops.dlrig_fit.attention.default,
        torch.ops.aten.max.default,
    }

    def context() -> Any:
        counts = {"forward": 0, "recompute": 0}

        def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
            mode = "recompute" if ctx.is_recompute else "forward"
            if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
                counts[mode] += 1
                if counts[mode] % 2 == 0:
                    return CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return context


@contextlib.contextmanager
def skip_weight_init() -> Iterator[None]:
    """Skip weight initialisation while building: fake tensors have no values to initialise,
    and some initialisers read values back (`.item()`), which fake tensors cannot answer."""
    import torch

    names = [n for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")]
    saved = {n: getattr(torch.nn.init, n) for n in names}
    for name in names:
        setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
    hf_context: Any = contextlib.nullcontext()
    try:
        from transformers.initialization import no_init_weights

        hf_context = no_init_weights()
    except ImportError:
        pass
    try:
        with hf_context:
            yield
    finally:
        for name, function in saved.items():
            setattr(torch.nn.init, name, function)


@contextlib.contextmanager
def default_dtype(dtype: Any) -> Iterator[None]:
    """Build parameters directly in `dtype` (pure bf16 training): converting a built fake model
    with .to() breaks tied weights."""
    import torch

    if dtype is None:
        yield
        return
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _trace(workload: Any, options: Options, batch: int) -> Any:
    import logging
    import warnings

    # Fake-tensor tracing logs every failed meta kernel and models warn about training flags;
    # the estimate reports failures itself.
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _trace_quietly(workload, options, batch)


def _trace_quietly(workload: Any, options: Options, batch: int) -> Any:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dlrig.fit.trace import trace_step

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with (
        mode,
        skip_weight_init(),
        default_dtype(torch.bfloat16 if options.precision == "bf16" else None),
    ):
        model = workload.build()
    model.train()
    if options.grad_checkpointing != "none":
        enable = getattr(model, "gradient_checkpointing_enable", None)
        if enable is None:
            raise InputError(
                f"{workload.name}: cannot turn on gradient checkpointing for a plain nn.Module",
                fix="drop --grad-checkpointing, or wrap the blocks with torch.utils.checkpoint yourself",
            )
        kwargs: dict[str, Any] = {"use_reentrant": False}
        if options.grad_checkpointing == "selective":
            kwargs["context_fn"] = _selective_policy()
        try:
            enable(gradient_checkpointing_kwargs=kwargs)
        except ValueError as exc:
            raise InputError(
                f"{workload.name}: {exc}", fix="drop --grad-checkpointing for this model"
            ) from None
    autocast = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(options.precision)

    def inputs() -> dict[str, Any]:
        made = workload.make_inputs(batch)
        if options.precision == "bf16":
            made = {
                k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in made.items()
            }
        return dict(made)

    return trace_step(
        mode,
        model,
        inputs,
        workload.loss_of,
        _make_optimizer(options.optimizer),
        autocast,
        call=workload.call,
    )


def _fitted(overrides: dict[str, float] | None) -> dict[str, float]:
    fitted = {k: float(v) for k, v in calibration()["fitted"].items() if isinstance(v, float | int)}
    fitted.update(overrides or {})
    return fitted


def _memory(
    trace: Any, options: Options, convolutional: bool, overrides: dict[str, float] | None = None
) -> Any:
    from dlrig.fit.memory import MemorySetup, estimate_memory

    table = calibration()
    setup = MemorySetup(
        precision=options.precision,
        strategy=options.strategy,
        gpus=options.gpus,
        grad_accum=options.grad_accum,
        optimizer=options.optimizer,
        convolutional=convolutional,
        calibration=_fitted(overrides),
        sizes={k: int(v) for k, v in table["sizes"].items() if isinstance(v, int)},
    )
    return estimate_memory(trace, setup)


def _time_setup(
    options: Options, spec: Any, gpus: int, overrides: dict[str, float] | None = None
) -> Any:
    from dlrig.fit.timing import TimeSetup

    table = calibration()
    ratios = table["mamf_ratio"]
    interconnect = options.interconnect or ("nvlink" if spec.has_nvlink else "pcie")
    return TimeSetup(
        precision=options.precision,
        strategy=options.strategy,
        gpus=gpus,
        gpus_per_node=options.gpus_per_node,
        grad_accum=options.grad_accum,
        interconnect=interconnect,
        network_gbps=options.network_gbps or float(table["network"]["default_gbps"]),
        calibration=_fitted(overrides),
        mamf_ratio=float(ratios.get(spec.id, ratios["default"])),
    )


def _max_batch(
    workload: Any, options: Options, first: tuple[int, Any], limit: int, convolutional: bool
) -> int:
    """Largest per-GPU batch whose peak fits: memory is affine in the batch, so two traces give
    the line and a third checks the answer."""
    b1, m1 = first
    b2 = b1 * 2
    m2 = _memory(_trace(workload, options, b2), options, convolutional).peak_bytes
    slope = max(1.0, (m2 - m1.peak_bytes) / (b2 - b1))
    intercept = m1.peak_bytes - slope * b1
    guess = max(0, int((limit - intercept) // slope))
    for _ in range(4):
        if guess < 1:
            return 0
        peak = _memory(_trace(workload, options, guess), options, convolutional).peak_bytes
        if peak <= limit:
            return guess
        guess = max(0, int(guess * limit / peak) - 1)
    return guess


def _global_batch(target: int, max_batch: int, gpus: int) -> dict[str, int]:
    per_step = math.ceil(target / gpus)
    accum = max(1, math.ceil(per_step / max(1, max_batch)))
    micro = math.ceil(per_step / accum)
    return {
        "target": target,
        "micro_batch_per_gpu": micro,
        "grad_accum": accum,
        "gpus": gpus,
        "global_batch": micro * accum * gpus,
    }


def estimate(options: Options | None = None, machine: Any = None, **kwargs: Any) -> FitResult:
    """Estimate memory, batch size and speed. Pass Options or keyword arguments of Options."""
    if options is None:
        options = Options(**kwargs)
    _check(options)
    from dlrig.fit import presets
    from dlrig.units import human_bytes

    if ":" in options.model:
        workload = presets.custom_workload(options.model, options.input_spec)
    else:
        workload = presets.preset_workload(options.model, options.seq_len, options.image_size)
    spec, gpu_memory, gpu_origin = _resolve_gpu(options, machine)
    batch = options.batch_size or workload.default_batch
    notes: list[str] = []
    try:
        trace = _trace(workload, options, batch)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - sorted below: tracing limits vs the model's own bugs
        if not _untraceable(exc):
            raise InputError(
                f"{workload.name}: the training step failed: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}",
                fix="check --input matches the model's forward; run one step of the model yourself to see the traceback",
            ) from None
        return _analytic(workload, options, spec, gpu_memory, batch, exc)
    convolutional = any("convolution" in op.name for op in trace.ops)
    memory = _memory(trace, options, convolutional)
    fits = memory.peak_bytes <= gpu_memory
    max_batch = None
    if options.search_max_batch:
        try:
            max_batch = _max_batch(workload, options, (batch, memory), gpu_memory, convolutional)
        except Exception as exc:  # noqa: BLE001 - a batch that cannot be traced ends the search
            notes.append(f"largest-batch search stopped: {type(exc).__name__}: {exc}")
    from dlrig.fit.timing import step_time

    timing = step_time(trace, spec, _time_setup(options, spec, options.gpus))
    single = step_time(trace, spec, _time_setup(options, spec, 1)) if options.gpus > 1 else timing
    samples_per_step = batch * options.gpus * options.grad_accum
    samples_per_s = samples_per_step / timing.step_s if timing.step_s else None
    tokens_per_s = (
        samples_per_s * workload.tokens_per_sample
        if samples_per_s and workload.tokens_per_sample
        else None
    )
    scaling = None
    if options.gpus > 1 and samples_per_s:
        scaling = (samples_per_s / options.gpus) / (batch * options.grad_accum / single.step_s)
    time_to_train = None
    if options.tokens and tokens_per_s:
        time_to_train = options.tokens / tokens_per_s
    elif options.dataset_size and samples_per_s:
        time_to_train = options.dataset_size * options.epochs / samples_per_s
    forward_flops = trace.flops("forward")
    flops_per_step = trace.flops("forward") + trace.flops("backward")
    peak = (
        spec.peak_tflops(
            {
                "fp32": "fp32",
                "tf32": "tf32",
                "amp-fp16": "fp16",
                "amp-bf16": "bf16",
                "bf16": "bf16",
            }[options.precision]
        )
        or spec.fp32_tflops
    )
    mfu = None
    if peak and timing.step_s:
        mfu = 3 * forward_flops * options.grad_accum / timing.step_s / (peak * 1e12)
    global_batch = (
        _global_batch(options.global_batch, max_batch or batch, options.gpus)
        if options.global_batch
        else None
    )
    table = calibration()
    assumptions = [
        f"GPU: {spec.id} ({gpu_origin}), {human_bytes(gpu_memory)} usable; dense peaks from the GPU catalogue ({spec.source.split(';')[0][:80]})",
        "memory traced on fake tensors for one steady-state step (optimizer state already allocated); "
        "attention uses fused-kernel memory (flash / memory-efficient: no S×S scores kept)",
        f"CUDA context {human_bytes(table['sizes']['cuda_context_bytes'])} and cuBLAS workspace "
        f"{human_bytes(table['sizes']['cublas_workspace_bytes'])} added"
        + (
            f"; cuDNN workspace {human_bytes(table['sizes']['cudnn_workspace_bytes'])}"
            if convolutional
            else ""
        ),
        f"allocator reserve {table['fitted']['allocator_reserve_factor']:.2f}× peak allocated (fragmentation)",
        f"optimizer {options.optimizer} with foreach kernels (PyTorch's CUDA default); state kept in the parameter dtype"
        if options.optimizer not in ("adamw-8bit", "adafactor")
        else f"optimizer {options.optimizer}: state sized analytically"
        if options.optimizer == "adamw-8bit"
        else "optimizer adafactor (transformers): factored state traced",
        f"precision {options.precision}: "
        + {
            "fp32": "fp32 everywhere (convolutions use TF32 as cuDNN does by default on Ampere+)",
            "tf32": "fp32 storage, TF32 tensor-core matmuls and convolutions",
            "amp-fp16": "fp32 weights and optimizer, fp16 autocast compute (GradScaler overhead ignored)",
            "amp-bf16": "fp32 weights and optimizer, bf16 autocast compute",
            "bf16": "bf16 weights, gradients and optimizer state",
        }[options.precision],
        f"time: per-operator roofline, matmuls at {table['fitted']['matmul_efficiency_of_mamf']:.2f}× the measured matmul ceiling "
        f"({_time_setup(options, spec, 1).mamf_ratio:.2f}× dense peak), memory-bound kernels at "
        f"{table['fitted']['memory_bandwidth_efficiency']:.2f}× bandwidth, ≥ {table['fitted']['min_kernel_us']:g} µs per kernel "
        "(calibrated on measured_training.csv)",
        "eager PyTorch: no torch.compile fusion, no CUDA graphs; data loading keeps up with the GPU",
    ]
    if options.gpus > 1:
        assumptions.append(
            f"{options.gpus} GPUs, {options.strategy}: {_time_setup(options, spec, options.gpus).interconnect} "
            f"at {timing.bus_bandwidth_gbs:.0f} GB/s all-reduce bus bandwidth"
            + (
                f", {options.network_gbps or table['network']['default_gbps']} Gb/s per GPU between nodes"
                if options.gpus > options.gpus_per_node
                else ""
            )
            + f"; communication overlaps {table['fitted']['overlap_fraction']:.0%} of backward"
        )
        if options.strategy == "ddp":
            assumptions.append(
                "DDP default gradient buckets (gradient_as_bucket_view=False: one extra copy of the gradients)"
            )
    if options.grad_checkpointing != "none":
        assumptions.append(
            f"gradient checkpointing: {options.grad_checkpointing} (transformers' gradient_checkpointing_enable, non-reentrant"
            + (
                ", torchtitan's op-level policy: keep every other matmul and attention outputs"
                if options.grad_checkpointing == "selective"
                else ""
            )
            + ")"
        )
    return FitResult(
        model=workload.name,
        method="trace",
        gpu=spec.id,
        gpu_memory_bytes=gpu_memory,
        params=trace.param_count,
        trainable_params=trace.trainable_count,
        batch_size=batch,
        seq_len=workload.seq_len,
        image_size=workload.image_size,
        memory_peak_bytes=memory.peak_bytes,
        memory_reserved_bytes=memory.reserved_bytes,
        memory_breakdown=memory.breakdown,
        peak_phase=memory.peak_phase,
        fits=fits,
        margin_bytes=gpu_memory - memory.peak_bytes,
        max_batch_size=max_batch,
        global_batch=global_batch,
        flops_per_step=flops_per_step * options.grad_accum,
        step_time_s=timing.step_s,
        samples_per_s=samples_per_s,
        tokens_per_s=tokens_per_s,
        time_to_train_s=time_to_train,
        mfu=mfu,
        scaling_efficiency=scaling,
        timing={
            "forward_s": timing.forward_s,
            "backward_s": timing.backward_s,
            "optimizer_s": timing.optimizer_s,
            "communication_s": timing.communication_s,
            "exposed_communication_s": timing.exposed_communication_s,
            "compute_bound_fraction": timing.compute_bound_fraction,
        },
        setup=_setup_dict(options, workload, batch, spec),
        assumptions=tuple(assumptions),
        notes=tuple(notes),
    )


def _setup_dict(options: Options, workload: Any, batch: int, spec: Any) -> dict[str, Any]:
    return {
        "batch_size": batch,
        "seq_len": workload.seq_len,
        "image_size": workload.image_size,
        "precision": options.precision,
        "optimizer": options.optimizer,
        "grad_checkpointing": options.grad_checkpointing,
        "grad_accum": options.grad_accum,
        "gpus": options.gpus,
        "strategy": options.strategy,
        "gpu": spec.id,
        "interconnect": options.interconnect or ("nvlink" if spec.has_nvlink else "pcie"),
    }


def _untraceable(exc: Exception) -> bool:
    """Errors of fake-tensor tracing itself (value-dependent Python, ops without meta kernels)."""
    from torch._subclasses import fake_tensor

    limits = tuple(
        getattr(fake_tensor, name)
        for name in (
            "DataDependentOutputException",
            "DynamicOutputShapeException",
            "UnsupportedOperatorException",
            "UnsupportedFakeTensorException",
        )
        if hasattr(fake_tensor, name)
    )
    if isinstance(exc, limits):
        return True
    text = str(exc)
    return isinstance(exc, NotImplementedError | RuntimeError) and (
        "meta" in text or "FakeTensor" in text or "data-dependent" in text
    )


def _analytic(
    workload: Any, options: Options, spec: Any, gpu_memory: int, batch: int, error: Exception
) -> FitResult:
    """When the step cannot be traced: parameters, gradients and optimizer state only."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dlrig.fit.memory import PRECISION_BYTES

    with FakeTensorMode(allow_non_fake_inputs=True), skip_weight_init():
        model = workload.build()
    params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    master, _ = PRECISION_BYTES[options.precision]
    state = {
        "sgd": 0,
        "sgd-momentum": master,
        "adam": 2 * master,
        "adamw": 2 * master,
        "adamw-8bit": 2,
        "adafactor": 0,
    }[options.optimizer]
    shard = options.gpus if options.strategy == "fsdp" else 1
    breakdown = {
        "parameters": int(master * params / shard),
        "gradients": int(
            master * trainable / (shard if options.strategy in ("fsdp", "zero2") else 1)
        ),
        "optimizer_state": int(
            state * trainable / (options.gpus if options.strategy != "ddp" else 1)
        ),
    }
    total = sum(breakdown.values())
    reason = f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}"
    torch.compiler.reset() if hasattr(torch, "compiler") else None
    return FitResult(
        model=workload.name,
        method="analytic",
        gpu=spec.id,
        gpu_memory_bytes=gpu_memory,
        params=params,
        trainable_params=trainable,
        batch_size=batch,
        seq_len=workload.seq_len,
        image_size=workload.image_size,
        memory_peak_bytes=total,
        memory_reserved_bytes=None,
        memory_breakdown=breakdown,
        peak_phase=None,
        fits=total <= gpu_memory,
        margin_bytes=gpu_memory - total,
        max_batch_size=None,
        global_batch=None,
        flops_per_step=None,
        step_time_s=None,
        samples_per_s=None,
        tokens_per_s=None,
        time_to_train_s=None,
        mfu=None,
        scaling_efficiency=None,
        timing={},
        setup=_setup_dict(options, workload, batch, spec),
        assumptions=(
            "ANALYTIC ESTIMATE: parameters, gradients and optimizer state only; activations are NOT included",
        ),
        notes=(
            f"the training step could not be traced ({reason}); typical cause: data-dependent control flow "
            "(Python `if` on a tensor value) or an operator without a meta implementation",
        ),
    )

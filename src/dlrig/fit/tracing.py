"""Stage 2 of the pipeline: workload -> TracedWorkload (fake-tensor traces, GPU-independent).

Two facts keep tracing cheap and exact:
- a transformer's layers repeat, and everything the estimate needs (sizes, live-memory peaks
  per phase, per-phase operator time) is affine in the number of layers, so the step is traced
  at 2 and 3 periods of the layer pattern and extrapolated to the full depth;
- the samples of a batch are independent, so every operator's FLOPs and bytes and every
  live-memory value are affine in the batch size: traces at two batches give any other batch
  (the largest-batch search, a planner's micro-batches) with no new trace. Where the two traces
  differ in structure, or for user factories (which may mix samples), other batches are traced.
"""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from dlrig.errors import InputError
from dlrig.fit import checkpointing, hfconfig, presets, store
from dlrig.fit.build import build_model, make_optimizer
from dlrig.fit.memory import extrapolate
from dlrig.fit.options import BNB_ADAMW, Options, check, replace_options
from dlrig.fit.sharding import Sizes
from dlrig.fit.store import Basis, basis_key
from dlrig.fit.tracedata import same_structure
from dlrig.fit.workload import Workload

if TYPE_CHECKING:
    from dlrig.fit.tracedata import Trace

_CACHE: OrderedDict[tuple[object, ...], TracedWorkload] = OrderedDict()
_BASES: OrderedDict[tuple[object, ...], Basis] = OrderedDict()
_CACHE_LIMIT = 32
AUTOCAST = {"amp-bf16": "bfloat16", "amp-fp16": "float16"}


@dataclass
class TracedWorkload:
    """One workload traced once; `fit.evaluate` turns it into answers for any GPU setup."""

    options: Options
    workload: Workload
    batch: int
    method: Literal["trace", "analytic"]
    sizes: Sizes
    depths: tuple[int, ...] = ()  # traced depths ((): the full model)
    samples: dict[int, list[tuple[int, Trace]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # why tracing failed (analytic)
    basis: Basis | None = None
    precision: str = "amp-bf16"  # the precision traced ("auto" resolved for the workload)

    @property
    def layers(self) -> int:
        return self.workload.layers or 0

    def at(self, batch: int) -> list[tuple[int, Trace]]:
        """Traces at another per-GPU batch (the largest-batch search): from the basis when the
        workload is affine in the batch, else traced once each."""
        if batch not in self.samples:
            found = self.basis.at(batch, self.depths) if self.basis is not None else None
            if found is None and self.basis is not None:
                self.basis = _basis(self.workload, self.options, batch, self.depths)
                found = self.basis.at(batch, self.depths)
            if found is None:
                found = _samples(self.workload, self.options, batch, self.depths)
            self.samples[batch] = found
        return self.samples[batch]


def traced_precision(options: Options, workload: Workload) -> str:
    """The precision the step is traced in. bf16 and fp16 autocast allocate the same bytes, so
    "auto" traces amp-bf16 and the GPU decides at evaluation; but a causal LM fine-tuned from a
    checkpoint stored in 16 bits trains in those 16 bits (from_pretrained(torch_dtype="auto")
    with Trainer(bf16=True): no fp32 master weights), unless LoRA/QLoRA freeze that base."""
    if options.precision != "auto":
        return options.precision
    if not (options.lora or options.qlora) and sixteen_bit_checkpoint(workload):
        return "bf16"
    return "amp-bf16"


def sixteen_bit_checkpoint(workload: Workload) -> bool:
    return workload.task == "causal_lm" and workload.checkpoint_dtype in ("bfloat16", "float16")


def run_trace(workload: Workload, options: Options, batch: int, depth: int | None) -> Trace:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dlrig.fit.step import trace_step  # lazy: torch; the rest of fit is numpy only

    # Fake-tensor tracing logs every failed meta kernel and models warn about training flags;
    # the estimate reports failures itself.
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    precision = traced_precision(options, workload)
    traced = replace_options(options, precision=precision)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            model = build_model(workload, traced, depth)
        autocast = getattr(torch, AUTOCAST[precision]) if precision in AUTOCAST else None

        def inputs() -> dict[str, Any]:
            made = workload.make_inputs(batch)
            if precision in ("bf16", "fp16"):
                dtype = torch.bfloat16 if precision == "bf16" else torch.float16
                made = {k: v.to(dtype) if v.is_floating_point() else v for k, v in made.items()}
            return dict(made)

        return trace_step(
            mode,
            model,
            inputs,
            workload.loss_of,
            make_optimizer(options.optimizer, options.optimizer_impl),
            autocast,
            call=workload.call,
            # torch.compile fuses all that Liger's kernels would
            compiled="liger"
            if options.compile == "none" and options.activations == "liger"
            else options.compile,
        )


def _samples(
    workload: Workload, options: Options, batch: int, depths: tuple[int, ...]
) -> list[tuple[int, Trace]]:
    if not depths:
        return [(workload.layers or 1, run_trace(workload, options, batch, None))]
    return [(d, run_trace(workload, options, batch, d)) for d in depths]


def sizes_of(samples: list[tuple[int, Trace]], layers: int) -> Sizes:
    depths = [d for d, _ in samples]

    def value(name: str) -> int:
        return round(extrapolate([float(getattr(t, name)) for _, t in samples], depths, layers))

    last = samples[-1][1]
    return Sizes(
        param_count=value("param_count"),
        trainable_count=value("trainable_count"),
        trainable_bytes=value("trainable_bytes"),
        frozen_bytes=value("frozen_bytes"),
        block_trainable=last.block_trainable,
        block_frozen_bytes=last.block_frozen_bytes,
        root_trainable=last.root_trainable,
        root_frozen_bytes=last.root_frozen_bytes,
        state_bytes=value("state_bytes"),
    )


def untraceable(exc: Exception) -> bool:
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


def _analytic(workload: Workload, options: Options, batch: int, exc: Exception) -> TracedWorkload:
    """When the step cannot be traced: sizes from the built model, no timeline."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dlrig.fit.step import sizes  # lazy: torch; the rest of fit is numpy only

    with FakeTensorMode(allow_non_fake_inputs=True):
        measured = sizes(build_model(workload, options, None))
    reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return TracedWorkload(
        options=options,
        workload=workload,
        batch=batch,
        precision=traced_precision(options, workload),
        method="analytic",
        sizes=Sizes(state_bytes=0, **measured),
        error=reason,
        notes=[
            f"the training step could not be traced ({reason}); typical cause: data-dependent "
            "control flow (Python `if` on a tensor value, MoE routing) or an operator without a "
            "meta implementation"
        ],
    )


def basis_options(options: Options, workload: Workload) -> Options:
    """The options as traced, one per distinct trace: "auto" as the precision it traces, and
    bitsandbytes' AdamW family as adamw (make_optimizer runs the same fp32 AdamW step)."""
    return replace_options(
        options,
        precision=traced_precision(options, workload),
        optimizer="adamw" if options.optimizer in BNB_ADAMW else options.optimizer,
    )


def _basis(workload: Workload, options: Options, batch: int, depths: tuple[int, ...]) -> Basis:
    options = basis_options(options, workload)
    key = basis_key(options)
    known = _BASES.get(key) or store.load(options, workload)
    if known is not None and (known.affine or batch in known.traces):
        _remember(key, known)
        return known
    # One batch is traced first; a second only when another batch is asked for (the
    # largest-batch search), and with the first it makes the basis affine in the batch. Most
    # questions (plan over a catalogue, one estimate) never need the second.
    new = dict(_samples(workload, options, batch, depths))
    basis = Basis((batch,), {batch: new}, affine=False)
    # A custom factory may mix samples (B×B losses): never extrapolated.
    if known is not None and len(known.batches) == 1 and workload.task != "custom":
        (first_batch,) = known.batches
        first = known.traces[first_batch]
        affine = all(same_structure(first[d], new[d]) for d in first)
        basis = Basis((first_batch, batch), {first_batch: first, batch: new}, affine)
    store.save(options, workload, basis)
    _remember(key, basis)
    return basis


def _remember(key: tuple[object, ...], basis: Basis) -> None:
    _BASES[key] = basis
    _BASES.move_to_end(key)
    if len(_BASES) > _CACHE_LIMIT:
        _BASES.popitem(last=False)


def make_workload(options: Any) -> Workload:
    """The workload the options name: a preset, a config.json, a Hub id, or module:factory."""
    workload = _named_workload(options)
    chunks = getattr(options, "loss_chunks", 0)
    if chunks:
        if workload.task != "causal_lm":
            raise InputError(
                f"--loss-chunks splits a causal LM's output projection and loss; "
                f"{options.model} is a {workload.task.replace('_', ' ')} model",
                fix="drop --loss-chunks",
            )
        workload = replace(workload, loss_chunks=chunks)
    return workload


def _named_workload(options: Any) -> Workload:
    if options.config is not None:
        return hfconfig.config_workload(options.config, options)
    if ":" in options.model and "/" not in options.model.split(":")[0]:
        if options.seq_len is not None or options.image_size is not None:
            raise InputError(
                "--seq-len/--image-size do not apply to a custom factory: its shapes come from --input",
                fix="describe the batch with --input 'x:float32[B,3,224,224]' and drop them",
            )
        return presets.custom_workload(options.model, options.input_spec)
    if options.input_spec is not None:
        raise InputError(
            f"--input applies to a custom module:factory, not to {options.model}",
            fix="drop --input (presets and configs build their own batch)",
        )
    if options.model in presets.presets():
        return presets.preset_workload(
            options.model, options.seq_len, options.image_size, options.attention
        )
    if "/" in options.model:
        return hfconfig.hub_workload(options.model, options)
    return presets.preset_workload(
        options.model, options.seq_len, options.image_size, options.attention
    )


def traced_depths(workload: Workload, options: Options) -> tuple[int, ...]:
    """2 and 3 repeats of the layer pattern, and of the checkpointed blocks' pattern when only
    some are (fit/checkpointing.py); () traces the whole model, when it is not deeper than that."""
    if not workload.layers:
        return ()
    period = workload.period
    if options.grad_checkpointing == "full" and options.checkpoint_blocks != 1.0:
        period = checkpointing.traced_period(period, options.checkpoint_blocks)
        if workload.layers < 3 * period + 1:
            return ()
    return (2 * period, 3 * period)


def trace(options: Options) -> TracedWorkload:
    """Trace `options`' workload once (cached by its workload fields)."""
    check(options)
    key = options.workload_key()
    cached = _CACHE.get(key)
    if cached is not None:
        _CACHE.move_to_end(key)
        return cached
    workload = make_workload(options)
    batch = options.batch_size or workload.default_batch
    depths = traced_depths(workload, options)
    try:
        basis = _basis(workload, options, batch, depths)
        samples = basis.at(batch, depths)
        assert samples is not None
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - sorted below: tracing limits vs the model's own bugs
        if not untraceable(exc):
            first = str(exc).splitlines()[0][:200] if str(exc) else ""
            raise InputError(
                f"{workload.name}: the training step failed: {type(exc).__name__}: {first}",
                fix="check --input matches the model's forward; run one step of the model yourself to see the traceback",
            ) from None
        result = _analytic(workload, options, batch, exc)
    else:
        layers = workload.layers or 1
        result = TracedWorkload(
            options=options,
            workload=workload,
            batch=batch,
            method="trace",
            sizes=sizes_of(samples, layers) if depths else sizes_of(samples[:1], layers),
            depths=depths,
            samples={batch: samples},
            notes=list(workload.notes),
            basis=basis,
            precision=traced_precision(options, workload),
        )
        if depths:
            result.notes.append(
                f"traced {depths[0]} and {depths[1]} of {layers} repeated layers and extrapolated "
                "to the full depth (sizes, memory peaks and time are affine in the layer count)"
            )
    _CACHE[key] = result
    if len(_CACHE) > _CACHE_LIMIT:
        _CACHE.popitem(last=False)
    return result

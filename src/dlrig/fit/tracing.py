"""Stage 2 of the pipeline: workload -> TracedWorkload (fake-tensor traces, GPU-independent).

A transformer's layers repeat, and everything the estimate needs (sizes, live-memory peaks per
phase, per-phase operator time) is affine in the number of layers. So the step is traced at 2
and 3 periods of the layer pattern and extrapolated to the full depth: a 70B model traces in a
few seconds and a few hundred MB. Models without a repeated stack are traced whole.
"""

from __future__ import annotations

import logging
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlrig.errors import InputError
from dlrig.fit.memory import extrapolate
from dlrig.fit.options import Options, replace_options
from dlrig.fit.sharding import Sizes
from dlrig.fit.workload import Workload

if TYPE_CHECKING:
    from dlrig.fit.recorder import Trace

_CACHE: OrderedDict[tuple[object, ...], TracedWorkload] = OrderedDict()
_CACHE_LIMIT = 32
AUTOCAST = {"amp-bf16": "bfloat16", "amp-fp16": "float16"}


@dataclass
class TracedWorkload:
    """One workload traced once; `fit.evaluate` turns it into answers for any GPU setup."""

    options: Options
    workload: Workload
    batch: int
    method: str  # "trace" | "analytic"
    sizes: Sizes
    depths: tuple[int, ...] = ()  # traced depths ((): the full model)
    samples: dict[int, list[tuple[int, Trace]]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    error: str | None = None  # why tracing failed (analytic)

    @property
    def layers(self) -> int:
        return self.workload.layers or 0

    def at(self, batch: int) -> list[tuple[int, Trace]]:
        """Traces at another per-GPU batch (the largest-batch search), traced once each."""
        if batch not in self.samples:
            self.samples[batch] = _samples(self.workload, self.options, batch, self.depths)
        return self.samples[batch]


def traced_precision(precision: str) -> str:
    # bf16 and fp16 autocast allocate the same bytes; "auto" is resolved per GPU at evaluation
    return "amp-bf16" if precision == "auto" else precision


def run_trace(workload: Workload, options: Options, batch: int, depth: int | None) -> Trace:
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dlrig.fit.build import build_model, make_optimizer
    from dlrig.fit.recorder import trace_step

    # Fake-tensor tracing logs every failed meta kernel and models warn about training flags;
    # the estimate reports failures itself.
    logging.getLogger("torch._subclasses.fake_tensor").setLevel(logging.CRITICAL)
    precision = traced_precision(options.precision)
    traced = replace_options(options, precision=precision)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mode = FakeTensorMode(allow_non_fake_inputs=True)
        with mode:
            model = build_model(workload, traced, depth)
        autocast = getattr(torch, AUTOCAST[precision]) if precision in AUTOCAST else None

        def inputs() -> dict[str, Any]:
            made = workload.make_inputs(batch)
            if precision == "bf16":
                made = {
                    k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in made.items()
                }
            return dict(made)

        return trace_step(
            mode,
            model,
            inputs,
            workload.loss_of,
            make_optimizer(options.optimizer),
            autocast,
            call=workload.call,
        )


def _samples(
    workload: Workload, options: Options, batch: int, depths: tuple[int, ...]
) -> list[tuple[int, Trace]]:
    if not depths:
        return [(workload.layers or 1, run_trace(workload, options, batch, None))]
    return [(d, run_trace(workload, options, batch, d)) for d in depths]


def _sizes(samples: list[tuple[int, Trace]], layers: int) -> Sizes:
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

    from dlrig.fit.build import build_model
    from dlrig.fit.recorder import sizes

    with FakeTensorMode(allow_non_fake_inputs=True):
        measured = sizes(build_model(workload, options, None))
    reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return TracedWorkload(
        options=options,
        workload=workload,
        batch=batch,
        method="analytic",
        sizes=Sizes(state_bytes=0, **measured),
        error=reason,
        notes=[
            f"the training step could not be traced ({reason}); typical cause: data-dependent "
            "control flow (Python `if` on a tensor value, MoE routing) or an operator without a "
            "meta implementation"
        ],
    )


def trace(options: Options) -> TracedWorkload:
    """Trace `options`' workload once (cached by its workload fields)."""
    from dlrig.fit.options import check
    from dlrig.fit.workload import make_workload

    check(options)
    key = options.workload_key()
    cached = _CACHE.get(key)
    if cached is not None:
        _CACHE.move_to_end(key)
        return cached
    workload = make_workload(options)
    batch = options.batch_size or workload.default_batch
    depths: tuple[int, ...] = ()
    if workload.layers:
        depths = (2 * workload.period, 3 * workload.period)
    try:
        samples = _samples(workload, options, batch, depths)
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
            sizes=_sizes(samples, layers) if depths else _sizes(samples[:1], layers),
            depths=depths,
            samples={batch: samples},
            notes=list(workload.notes),
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

"""The pipeline: options -> workload -> trace -> memory -> time -> result.

`trace` (fit/tracing.py) is the only expensive stage and depends only on the workload;
`evaluate` turns one trace into the answer for a GPU, a GPU count and a strategy with numpy
alone, so a planner can sweep the catalogue with one trace per model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dlrig.errors import InputError
from dlrig.fit import analytic, assemble, hardware, inference, tracing
from dlrig.fit.context import convolutional, resolve, sharded_full, storage
from dlrig.fit.options import WORKLOAD_FIELDS, Options, check, replace_options
from dlrig.fit.parallel import mesh_of
from dlrig.fit.result import FitResult
from dlrig.fit.tracing import TracedWorkload


def evaluate(traced: TracedWorkload, machine: Any = None, **changes: Any) -> FitResult:
    """The estimate for one GPU setup from a trace. Keyword arguments are Options fields that
    do not change the trace: gpu, gpus, strategy, gpus_per_node, network_gbps, interconnect,
    grad_accum, global_batch, tokens, dataset_size, epochs, offload, prefetch, channels_last,
    keep_grads, search_max_batch, advise (and optimizer among adam/adamw/adamw-8bit/paged-adamw/paged-adamw-8bit)."""
    changes.setdefault("search_max_batch", False)
    changes.setdefault("advise", False)
    if traced.options.precision == "auto" or changes.get("precision") == "auto":
        # "auto" traced bf16 weights for a 16-bit LLM checkpoint; a GPU without bf16 trains it
        # with fp16 autocast over fp32 master weights instead, and so does FSDP/ZeRO: that is
        # another trace. The request stays "auto", so the reason given is the default's.
        target = hardware.target(changes.get("gpu", traced.options.gpu), machine)
        cluster = replace_options(traced.options, **_cluster_only(changes))
        wanted, _ = hardware.resolve_precision(
            "auto", target.spec, traced.precision, sharded_full(cluster)
        )
        if storage(wanted) != storage(traced.precision):
            traced = trace(replace_options(traced.options, precision=wanted))
        changes["precision"] = "auto"
    ctx = resolve(traced, machine, changes)
    if ctx.options.channels_last and traced.method == "trace" and not convolutional(traced):
        raise InputError(
            f"--channels-last applies to convolution nets; {traced.workload.name} has no convolutions",
            fix="drop --channels-last",
        )
    if traced.method == "analytic":
        return analytic.from_sizes(traced, ctx)
    return assemble.result(traced, ctx)


def _cluster_only(changes: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in changes.items() if k not in WORKLOAD_FIELDS}


def trace(options: Options) -> TracedWorkload:
    traced = tracing.trace(options)
    # traces are cached by their workload fields: the setup options (GPU, strategy, fp8, ...)
    # are this caller's, not those of whoever traced the workload first
    return traced if traced.options == options else dataclasses.replace(traced, options=options)


def estimate(options: Options, machine: Any = None) -> FitResult:
    """Estimate memory, batch size and speed."""
    check(options)
    if options.analytic and not mesh_of(options).trivial:
        raise InputError(
            "--tp/--pp/--cp are modelled on the traced estimate, not the analytic one",
            fix="drop --analytic (or the model-parallel degrees)",
        )
    if options.analytic:
        return analytic.estimate_from_config(options, machine)
    # resolve the GPU first: a typo in --gpu should not cost a trace
    spec = hardware.target(options.gpu, machine).spec
    hardware.resolve_precision(options.precision, spec)
    if options.inference:
        return inference.estimate(options, machine)
    first = options
    if options.precision == "auto":
        # trace in the precision "auto" resolves to here, when that is known before tracing
        # (sharded fp32 masters), instead of tracing the checkpoint's bf16 first, then again
        wanted, _ = hardware.resolve_precision("auto", spec, None, sharded_full(options))
        if sharded_full(options) and wanted == "amp-bf16":
            first = replace_options(options, precision=wanted)
    traced = trace(first)
    cluster = {
        name: getattr(options, name)
        for name in (
            "gpu",
            "gpus",
            "strategy",
            "gpus_per_node",
            "network_gbps",
            "interconnect",
            "grad_accum",
            "global_batch",
            "tokens",
            "dataset_size",
            "epochs",
            "offload",
            "prefetch",
            "channels_last",
            "keep_grads",
            "optimizer_in_backward",
            "activation_offload",
            "grad_sync",
            "fsdp_mixed_units",
            "fp8",
            "tp",
            "pp",
            "cp",
            "pp_schedule",
            "search_max_batch",
            "advise",
        )
    }
    return evaluate(traced, machine, precision=options.precision, **cluster)

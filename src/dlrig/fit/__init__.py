"""`dlrig fit`: will this model train (or serve) on this GPU, at which batch size, and how fast?

    from dlrig import fit
    result = fit.run(fit.Options(model="llama3-8b", gpu="h100", seq_len=8192, grad_checkpointing="full"))
    result.fits, result.memory_peak_bytes, result.max_batch_size, result.tokens_per_s

    traced = fit.trace(fit.Options(model="llama3-8b", seq_len=4096))   # once per workload
    fit.evaluate(traced, gpu="a100-sxm4-80gb", gpus=16, strategy="fsdp")  # cheap, any setup

The pipeline hands one value forward: Options -> Workload (fit/workload.py) -> TracedWorkload
(fit/tracing.py, fake tensors) -> MemoryEstimate (fit/memory.py, fit/sharding.py) -> StepTime
(fit/timing.py) -> FitResult (fit/result.py). Importing this package does not import torch.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Unpack

from dlrig.fit.options import (
    CHECKPOINTING,
    OPTIMIZERS,
    PRECISIONS,
    STRATEGIES,
    WEIGHT_FORMATS,
    Options,
    SetupChanges,
)
from dlrig.fit.result import SCHEMA, SCHEMA_VERSION, Advice, FitResult
from dlrig.machine.model import Machine
from dlrig.report import Progress, no_progress

if TYPE_CHECKING:
    from dlrig.fit.tracing import TracedWorkload

__all__ = [
    "CHECKPOINTING",
    "OPTIMIZERS",
    "PRECISIONS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "STRATEGIES",
    "WEIGHT_FORMATS",
    "Advice",
    "FitResult",
    "Options",
    "SetupChanges",
    "estimate",
    "evaluate",
    "run",
    "trace",
]


def _pipeline() -> ModuleType:
    from dlrig.fit import pipeline  # lazy: numpy, so `import dlrig.fit` stays light

    return pipeline


def trace(options: Options) -> TracedWorkload:
    """Trace the workload of `options` once (GPU-independent; cached in-process)."""
    return _pipeline().trace(options)


def evaluate(
    traced: TracedWorkload, machine: Machine | None = None, **changes: Unpack[SetupChanges]
) -> FitResult:
    """The estimate for one GPU setup (gpu=, gpus=, strategy=, ...) from a trace: numpy only.

    `machine`: the snapshot whose GPU `gpu=None` means (`dlrig doctor --save`)."""
    return _pipeline().evaluate(traced, machine, **changes)


def run(
    options: Options, *, machine: Machine | None = None, progress: Progress = no_progress
) -> FitResult:
    """Trace and evaluate in one call, with the largest-batch search and advice: what
    `dlrig fit --json` prints. `machine`: the snapshot whose GPU `gpu=None` means."""
    progress("fit: tracing the workload", 0.0)
    result = _pipeline().estimate(options, machine)
    progress("fit: done", 1.0)
    return result


def estimate(options: Options, machine: Machine | None = None) -> FitResult:
    """`run` without progress (the name of earlier releases)."""
    return run(options, machine=machine)

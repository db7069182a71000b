"""What a traced step is, as plain arrays (numpy only: evaluation never imports torch).

`OpTable` holds one entry per operator that moves data or computes; `Trace` adds the sizes and
the live-memory curves. Everything in a trace is affine in the batch size for models whose
samples are independent, so `affine` combines traces at two batches into any other, exactly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

PHASES = ("forward", "backward", "optimizer")
PHASE_CODES = {"forward": 0, "backward": 1, "optimizer": 2}
# operator classes the time model gives their own efficiency
KINDS = ("matmul", "conv", "attention", "memory", "optimizer")
KIND_CODES = {name: code for code, name in enumerate(KINDS)}
DTYPE_CODES = {"bfloat16": 0, "float16": 1, "float32": 2}  # anything else: 3
CURVES = ("activation", "weight_copy", "backward_temp", "gradient", "optimizer_temp")


class AllocationLike(Protocol):
    nbytes: int
    start: int
    end: int | None
    category: str


@dataclass(frozen=True)
class OpTable:
    """The traced operators as arrays (one entry per operator that moves data or computes)."""

    names: tuple[str, ...]  # vocabulary
    name: np.ndarray  # int32 index into names
    phase: np.ndarray  # int8: 0 forward, 1 backward, 2 optimizer
    kind: np.ndarray  # int8: index into KINDS
    dtype: np.ndarray  # int8: 0 bf16, 1 fp16, 2 fp32, 3 other
    nchw: np.ndarray  # bool: a convolution on a (N, C, H, W)-contiguous input
    flops: np.ndarray  # float64
    traffic: np.ndarray  # float64 bytes read + written
    count: np.ndarray | None = None  # identical operators merged into one entry (stored traces)

    def __len__(self) -> int:
        return int(self.flops.shape[0])

    def weights(self) -> np.ndarray:
        """How many operators each entry stands for (1 each unless merged)."""
        return self.count if self.count is not None else np.ones(len(self))

    def has(self, name: str) -> bool:
        return name in self.names and bool((self.name == self.names.index(name)).any())

    def names_of(self) -> list[str]:
        return [self.names[i] for i in self.name]

    def same_structure(self, other: OpTable) -> bool:
        return (
            self.names == other.names
            and np.array_equal(self.name, other.name)
            and np.array_equal(self.kind, other.kind)
            and np.array_equal(self.phase, other.phase)
            and np.array_equal(self.dtype, other.dtype)
            and np.array_equal(self.weights(), other.weights())
        )


@dataclass
class Trace:
    """What one traced step produced: sizes, live-memory curves over the step, operator costs."""

    param_count: int  # logical parameters (a 4-bit weight counts once)
    trainable_count: int
    trainable_bytes: int  # storage of the trainable parameters as built
    frozen_bytes: int  # storage of frozen parameters and buffers (4-bit codes for QLoRA)
    grad_bytes: int
    state_bytes: int
    events: int
    ops: OpTable
    block_trainable: int  # the largest repeated block (an FSDP unit)
    block_frozen_bytes: int
    root_trainable: int  # parameters outside the repeated blocks (FSDP's root unit)
    root_frozen_bytes: int
    curves: dict[str, np.ndarray] = field(default_factory=dict)  # name -> live bytes per event
    phase_spans: dict[str, tuple[int, int]] = field(default_factory=dict)

    def flops(self, phase: str | None = None) -> float:
        flops = self.ops.flops * self.ops.weights()
        if phase is None:
            return float(flops.sum())
        return float(flops[self.ops.phase == PHASE_CODES[phase]].sum())


def curves_of(allocations: Sequence[AllocationLike], events: int) -> dict[str, np.ndarray]:
    diff = {name: np.zeros(events + 2) for name in CURVES}
    for allocation in allocations:
        name = allocation.category
        if name not in diff:
            continue
        end = allocation.end if allocation.end is not None else events + 1
        diff[name][allocation.start] += allocation.nbytes
        diff[name][min(end, events + 1)] -= allocation.nbytes
    return {name: np.cumsum(values)[: events + 1] for name, values in diff.items()}


def same_structure(a: Trace, b: Trace) -> bool:
    return a.events == b.events and a.phase_spans == b.phase_spans and a.ops.same_structure(b.ops)


def affine(a: Trace, b: Trace, x_a: float, x_b: float, x: float) -> Trace:
    """The trace at `x` from traces `a` at `x_a` and `b` at `x_b` of the same structure (batch
    sizes: every operator's FLOPs and bytes and every live-memory value are affine in them)."""
    if not same_structure(a, b):
        raise ValueError("traces of different structure cannot be combined")
    w = (x - x_a) / (x_b - x_a)

    def line(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return np.maximum(0.0, u + (v - u) * w)

    ops = replace(
        a.ops, flops=line(a.ops.flops, b.ops.flops), traffic=line(a.ops.traffic, b.ops.traffic)
    )
    return replace(
        a,
        ops=ops,
        curves={name: line(a.curves[name], b.curves[name]) for name in a.curves},
        grad_bytes=a.grad_bytes,
        state_bytes=a.state_bytes,
    )

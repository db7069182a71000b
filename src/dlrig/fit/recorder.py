"""Record one fake-tensor training step: every storage's life and every operator's cost.

A dispatch mode sits on top of `FakeTensorMode`: each operator runs its shape/dtype logic but
allocates nothing. The recorder notes each new storage (the phase that made it and the event at
which it dies) and each operator's FLOPs (PyTorch's own formulas), bytes read and written, its
class (matmul, convolution, attention, memory-bound, optimizer) and dtype, into arrays that the
time model (fit/timing.py) evaluates for any GPU (fit/tracedata.py holds those arrays).
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from dlrig.fit import attention, grouped
from dlrig.fit.tracedata import DTYPE_CODES, KIND_CODES, PHASE_CODES, OpTable

_CONV = ("aten.convolution", "aten.convolution_backward", "aten._convolution")
_ATTENTION = (attention.FORWARD, attention.BACKWARD)
_COMPUTE = (KIND_CODES["matmul"], KIND_CODES["conv"], KIND_CODES["attention"])
# Scatters write into a whole materialised buffer: inductor runs them as kernels of their own
# (cross-entropy's backward writes its full fp32 gradient this way), never fused away.
_SCATTERS = ("scatter", "index_put", "index_add", "nll_loss_backward", "embedding_dense_backward")
# Operators that only make a view (by the name after "aten."); is_view covers the rest. A name
# is compared whole: a suffix test took cat, rsqrt, native_dropout and index_select for
# views ("t", "select"), so they were never timed.
_VIEWS = frozenset(
    (
        "view",
        "_unsafe_view",
        "t",
        "expand",
        "permute",
        "transpose",
        "slice",
        "select",
        "as_strided",
        "detach",
        "alias",
        "unsqueeze",
        "squeeze",
        "view_as",
        "expand_as",
        "_reshape_alias",
    )
)
# creating optimizer state happens once, not in a steady-state step
_STATE_INIT = {"aten.zeros_like", "aten.zeros", "aten.empty_like", "aten.full_like", "aten.empty"}


@dataclass
class Allocation:
    nbytes: int
    phase: str
    start: int
    end: int | None = None
    category: str = "other"
    weight_copy: bool = False  # a cast of a parameter (autocast's weight copies)
    # provenance, kept only when tracing for torch.compile (fit/compiled.py reads it)
    index: int = -1
    pointwise: bool = False  # made by a memory-bound operator that is not a reduction
    inputs: tuple[int, ...] = ()  # indices of the allocations the operator read
    to_compute: bool = False  # read by a matmul, convolution or attention operator


@dataclass
class FusedGroup:
    """Consecutive memory-bound operators of one phase: one kernel under torch.compile."""

    row: int  # its entry in the operator table
    phase: str
    reads: dict[int, int] = field(default_factory=dict)  # storage key -> bytes read from outside
    outputs: list[Allocation] = field(default_factory=list)
    last_event: int = 0


class _OpLog:
    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.columns: tuple[list[Any], ...] = ([], [], [], [], [], [], [])

    def add(self, *values: Any) -> None:
        name, *rest = values
        code = self.vocab.setdefault(name, len(self.vocab))
        for column, value in zip(self.columns, (code, *rest), strict=True):
            column.append(value)

    def table(self) -> OpTable:
        name, phase, kind, dtype, nchw, flops, traffic = self.columns
        return OpTable(
            names=tuple(self.vocab),
            name=np.array(name, dtype=np.int32),
            phase=np.array(phase, dtype=np.int8),
            kind=np.array(kind, dtype=np.int8),
            dtype=np.array(dtype, dtype=np.int8),
            nchw=np.array(nchw, dtype=bool),
            flops=np.array(flops, dtype=np.float64),
            traffic=np.array(traffic, dtype=np.float64),
        )


def _dtype_code(tensor: torch.Tensor | None) -> int:
    if tensor is None:
        return DTYPE_CODES["float32"]
    return DTYPE_CODES.get(str(tensor.dtype).removeprefix("torch."), 3)


def _nchw(tensor: torch.Tensor | None) -> bool:
    if tensor is None or tensor.dim() < 4:
        return False
    return not tensor.is_contiguous(memory_format=torch.channels_last)


class Recorder(TorchDispatchMode):
    """Records storages created by each op (and when they die) and each op's cost."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "setup"
        self.event = 0
        self.live: dict[int, Allocation] = {}
        self.allocations: list[Allocation] = []
        self.log = _OpLog()
        self.param_keys: set[int] = set()
        self.preexisting: set[int] = set()  # storages made before the step: never allocations
        # torch.compile: memory-bound operators fuse into one entry per run of them, and every
        # allocation keeps where it came from (fit/compiled.py decides what is saved)
        self.fuse = False
        self.fusing = True  # off outside the compiled region (torchtitan compiles blocks only)
        self.groups: list[FusedGroup] = []
        self._open: FusedGroup | None = None

    @contextlib.contextmanager
    def in_phase(self, phase: str) -> Iterator[None]:
        previous, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = previous

    def _free(self, key: int) -> None:
        allocation = self.live.pop(key, None)
        if allocation is not None:
            allocation.end = self.event

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.event += 1
        outputs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        cast = (
            func is torch.ops.aten._to_copy.default
            and source is not None
            and source.untyped_storage()._cdata in self.param_keys
        )
        made: list[Allocation] = []
        for tensor in outputs:
            storage = tensor.untyped_storage()
            key = storage._cdata
            if key in self.live or key in self.preexisting:
                continue  # a view of a tensor that already existed (parameters, inputs)
            allocation = Allocation(
                storage.nbytes(),
                self.phase,
                self.event,
                weight_copy=cast,
                index=len(self.allocations),
            )
            self.live[key] = allocation
            self.allocations.append(allocation)
            made.append(allocation)
            weakref.finalize(storage, self._free, key)
        if self.phase in PHASE_CODES:
            self._cost(func, args, kwargs, out, outputs, made)
        else:
            self._close()
        return out

    def _close(self) -> None:
        """End the open fused kernel before the current operator: what died by then (even
        after a metadata call such as prim.device) was read only inside it."""
        if self._open is not None:
            self._open.last_event = self.event - 1
            self._open = None

    def _cost(
        self,
        func: Any,
        args: Any,
        kwargs: Any,
        out: Any,
        outputs: list[torch.Tensor],
        made: list[Allocation],
    ) -> None:
        packet = getattr(func, "_overloadpacket", None)
        name = str(packet) if packet is not None else str(func)
        is_view = getattr(func, "is_view", False) or name.rpartition(".")[2] in _VIEWS
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        flops = attention.op_flops(name, args)
        if flops is None:
            flops = grouped.op_flops(name, args)
        if flops is None:
            flops = 0.0
            if packet in flop_registry:
                try:
                    flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
                except Exception:  # noqa: BLE001 - an unusual overload: count its bytes only
                    flops = 0.0
        schema = getattr(func, "_schema", None)
        mutates = bool(schema is not None and schema.is_mutable)
        if flops == 0 and (is_view or name.startswith("prim.") or (not outputs and not mutates)):
            return  # metadata and views move no data
        if self.phase == "optimizer" and name in _STATE_INIT:
            return
        traffic = float(sum(t.nbytes for t in inputs) + sum(t.nbytes for t in outputs))
        if mutates and not outputs:
            traffic += float(sum(t.nbytes for t in inputs)) / 2  # in-place foreach: write back
        first = inputs[0] if inputs else None
        if name in _CONV:
            kind = KIND_CODES["conv"]
        elif name in _ATTENTION:
            kind = KIND_CODES["attention"]
        elif flops > 0:
            kind = KIND_CODES["matmul"]
        elif self.phase == "optimizer":
            kind = KIND_CODES["optimizer"]
        else:
            kind = KIND_CODES["memory"]
        nchw = kind == KIND_CODES["conv"] and _nchw(first)
        if self.fuse:
            self._provenance(kind, name, inputs, outputs, made)
            if kind == KIND_CODES["memory"] and self.fusing and not name.endswith(_SCATTERS):
                self._fuse(name, inputs, made, _dtype_code(first))
                return
            self._close()
        self.log.add(name, PHASE_CODES[self.phase], kind, _dtype_code(first), nchw, flops, traffic)

    def _provenance(
        self,
        kind: int,
        name: str,
        inputs: list[torch.Tensor],
        outputs: list[torch.Tensor],
        made: list[Allocation],
    ) -> None:
        read = [
            self.live[k] for k in {t.untyped_storage()._cdata for t in inputs} if k in self.live
        ]
        if kind in _COMPUTE:
            for allocation in read:
                allocation.to_compute = True
        largest_in = max((t.numel() for t in inputs), default=0)
        largest_out = max((t.numel() for t in outputs), default=0)
        # A reduction's output (norm statistics, softmax) is saved, not recomputed: inductor's
        # partitioner bans recomputing reductions (functorch config ban_recompute_reductions).
        reduces = largest_out < largest_in or "softmax" in name or name.endswith(_SCATTERS)
        for allocation in made:
            allocation.pointwise = kind == KIND_CODES["memory"] and not reduces and self.fusing
            allocation.inputs = tuple(a.index for a in read)

    def _fuse(
        self, name: str, inputs: list[torch.Tensor], made: list[Allocation], dtype: int
    ) -> None:
        group = self._open
        if group is not None and group.phase != self.phase:
            self._close()
            group = None
        if group is None:
            row = len(self.log.columns[0])
            self.log.add(
                "inductor.fused",
                PHASE_CODES[self.phase],
                KIND_CODES["memory"],
                dtype,
                False,
                0.0,
                0.0,
            )
            group = self._open = FusedGroup(row, self.phase)
            self.groups.append(group)
        inside = {id(a) for a in group.outputs}
        for tensor in inputs:
            key = tensor.untyped_storage()._cdata
            if id(self.live.get(key)) in inside:
                continue  # made by an earlier operator of the same kernel: never in memory
            group.reads[key] = max(group.reads.get(key, 0), tensor.nbytes)
        group.outputs.extend(made)
        group.last_event = self.event  # until the next kernel closes it

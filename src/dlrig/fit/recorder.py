"""Trace one real training step on fake tensors: memory timeline, FLOPs and bytes per op.

The model is built and run under `FakeTensorMode`: every operator runs its shape/dtype logic
but allocates nothing, so a 70B model "trains" on a laptop in seconds. A dispatch mode on top
records each new storage (with the phase that created it and when it is freed) and each
operator's FLOPs (PyTorch's own FLOP formulas) and bytes read and written.

The trace runs CPU kernels' meta implementations; what differs on a GPU is accounted for:
- scaled_dot_product_attention is replaced by an op with the memory and FLOPs of the GPU's
  fused kernels (flash / memory-efficient: the output and a log-sum-exp are saved, never the
  S×S score matrix), so the CPU's kernel choice does not leak into the estimate;
- workspaces (cuBLAS, cuDNN) and the CUDA context are added by the memory model;
- autocast's casts of weights appear in the trace as the tensors backward saves.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

PHASES = ("setup", "forward", "backward", "optimizer")
CATEGORIES = (
    "activation",
    "backward_temp",
    "gradient",
    "optimizer_state",
    "optimizer_temp",
    "other",
)


# --- attention with the GPU kernels' memory and FLOPs ---------------------------------------
@torch.library.custom_op("dlrig_fit::attention", mutates_args=())
def _attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    raise RuntimeError("dlrig_fit::attention only runs on fake tensors")


@_attention.register_fake
def _attention_fake(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    out = q.new_empty((*q.shape[:-1], v.shape[-1]))
    # flash/efficient attention keep a float32 log-sum-exp per query for backward
    lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
    return out, lse


@torch.library.custom_op("dlrig_fit::attention_backward", mutates_args=())
def _attention_backward(
    grad: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    raise RuntimeError("dlrig_fit::attention_backward only runs on fake tensors")


@_attention_backward.register_fake
def _attention_backward_fake(
    grad: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    q, k, v, causal = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.causal = causal


def _backward(ctx: Any, grad_out: torch.Tensor, grad_lse: torch.Tensor | None) -> tuple[Any, ...]:
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = _attention_backward(grad_out, q, k, v, out, lse, ctx.causal)
    return dq, dk, dv, None


_attention.register_autograd(_backward, setup_context=_setup)


def attention_flops(
    q_shape: tuple[int, ...], k_shape: tuple[int, ...], v_shape: tuple[int, ...], causal: bool
) -> float:
    """Forward FLOPs of attention: QKᵀ and PV, halved for causal masks (flash skips them)."""
    batch_heads = math.prod(q_shape[:-2])
    sq, d = q_shape[-2], q_shape[-1]
    sk, dv = k_shape[-2], v_shape[-1]
    flops = 2.0 * batch_heads * sq * sk * (d + dv)
    return flops * (0.5 if causal and sq == sk else 1.0)


def fake_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: Any = None,
    enable_gqa: bool = False,
    **_: Any,
) -> torch.Tensor:
    """Drop-in for F.scaled_dot_product_attention with fused-kernel memory behaviour."""
    # The real SDPA is on autocast's lower-precision list: its inputs are cast first.
    if torch.is_autocast_enabled("cpu"):
        dtype = torch.get_autocast_dtype("cpu")
        query, key, value = (t.to(dtype) for t in (query, key, value))
    if attn_mask is not None and not is_causal:
        is_causal = False
    out, _lse = _attention(query, key, value, bool(is_causal))
    return out


# --- the recorder --------------------------------------------------------------------------
@dataclass
class OpCost:
    name: str
    phase: str
    flops: float
    bytes: float
    dtype: str  # dtype of the first tensor input (decides tensor-core peak)


@dataclass
class Allocation:
    nbytes: int
    phase: str
    start: int
    end: int | None = None
    category: str = "other"
    weight_copy: bool = False  # a cast of a parameter (autocast's weight copies)


_STATE_INIT = {"aten.zeros_like", "aten.zeros", "aten.empty_like", "aten.full_like", "aten.empty"}


class Recorder(TorchDispatchMode):
    """Records storages created by each op (and when they die) and each op's cost."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "setup"
        self.event = 0
        self.live: dict[int, Allocation] = {}
        self.allocations: list[Allocation] = []
        self.ops: list[OpCost] = []
        self.param_keys: set[int] = set()
        self.preexisting: set[int] = set()  # storages made before the step: never allocations

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
        for tensor in outputs:
            storage = tensor.untyped_storage()
            key = storage._cdata
            if key in self.live or key in self.preexisting:
                continue  # a view of a tensor that already existed (parameters, inputs)
            allocation = Allocation(storage.nbytes(), self.phase, self.event, weight_copy=cast)
            self.live[key] = allocation
            self.allocations.append(allocation)
            weakref.finalize(storage, self._free, key)
        if self.phase in ("forward", "backward", "optimizer"):
            self._cost(func, args, kwargs, out, outputs)
        return out

    def _cost(
        self, func: Any, args: Any, kwargs: Any, out: Any, outputs: list[torch.Tensor]
    ) -> None:
        packet = getattr(func, "_overloadpacket", None)
        name = str(packet) if packet is not None else str(func)
        is_view = getattr(func, "is_view", False) or name.endswith(
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
            )
        )
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        flops = 0.0
        if packet in flop_registry:
            try:
                flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
            except Exception:  # noqa: BLE001 - an unusual overload: count its bytes only
                flops = 0.0
        elif name == "dlrig_fit.attention":
            q, k, v, causal = args[:4]
            flops = attention_flops(tuple(q.shape), tuple(k.shape), tuple(v.shape), bool(causal))
        elif name == "dlrig_fit.attention_backward":
            q, k, v = args[1:4]
            flops = 2.5 * attention_flops(
                tuple(q.shape), tuple(k.shape), tuple(v.shape), bool(args[6])
            )
        schema = getattr(func, "_schema", None)
        mutates = bool(schema is not None and schema.is_mutable)
        if flops == 0 and (is_view or name.startswith("prim.") or (not outputs and not mutates)):
            return  # metadata and views move no data
        if self.phase == "optimizer" and name in _STATE_INIT:
            return  # creating optimizer state happens once, not in a steady-state step
        traffic = float(sum(t.nbytes for t in inputs) + sum(t.nbytes for t in outputs))
        if mutates and not outputs:
            traffic += float(sum(t.nbytes for t in inputs)) / 2  # in-place foreach: write back
        dtype = str(inputs[0].dtype).removeprefix("torch.") if inputs else "float32"
        self.ops.append(OpCost(name, self.phase, flops, traffic, dtype))


CURVES = ("activation", "weight_copy", "backward_temp", "gradient", "optimizer_temp")


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
    ops: list[OpCost]
    block_trainable: int  # the largest repeated block (an FSDP unit)
    block_frozen_bytes: int
    root_trainable: int  # parameters outside the repeated blocks (FSDP's root unit)
    root_frozen_bytes: int
    curves: dict[str, Any] = field(default_factory=dict)  # name -> live bytes per event
    phase_spans: dict[str, tuple[int, int]] = field(default_factory=dict)

    def flops(self, phase: str | None = None) -> float:
        return sum(op.flops for op in self.ops if phase is None or op.phase == phase)


def _unique_parameters(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    return list(model.parameters())  # parameters() already skips tied duplicates


def _blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated blocks: children of the longest ModuleList (what FSDP wraps one by one)."""
    best: list[torch.nn.Module] = []
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList | torch.nn.Sequential) and len(module) > 1:
            children = list(module)
            if len(children) > len(best) or (
                len(children) == len(best)
                and sum(p.numel() for c in children for p in c.parameters())
                > sum(p.numel() for c in best for p in c.parameters())
            ):
                best = children
    return best


def _bytes(params: list[torch.nn.Parameter], trainable: bool) -> int:
    return sum(p.numel() * p.element_size() for p in params if p.requires_grad == trainable)


def sizes(model: torch.nn.Module) -> dict[str, int]:
    """Parameter counts and bytes, the largest block and the root outside the blocks."""
    params = _unique_parameters(model)
    logical = 0
    packed: set[int] = set()
    for module in model.modules():
        if hasattr(module, "logical_params"):
            logical += int(getattr(module, "logical_params"))  # noqa: B009 - set by peft.NF4Linear
            packed.update(id(p) for p in module.parameters(recurse=False) if p.dtype == torch.uint8)
    count = logical + sum(p.numel() for p in params if id(p) not in packed)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    blocks = _blocks(model)
    in_blocks = {id(p) for block in blocks for p in block.parameters()}
    largest = max(blocks, key=lambda b: sum(p.numel() for p in b.parameters()), default=None)
    block_params = list(largest.parameters()) if largest is not None else []
    root = [p for p in params if id(p) not in in_blocks]
    return {
        "param_count": count,
        "trainable_count": sum(p.numel() for p in params if p.requires_grad),
        "trainable_bytes": _bytes(params, True),
        "frozen_bytes": _bytes(params, False) + buffers,
        "block_trainable": sum(p.numel() for p in block_params if p.requires_grad),
        "block_frozen_bytes": _bytes(block_params, False),
        "root_trainable": sum(p.numel() for p in root if p.requires_grad),
        "root_frozen_bytes": _bytes(root, False),
    }


@contextlib.contextmanager
def fused_attention() -> Iterator[None]:
    """Route F.scaled_dot_product_attention to the fused-kernel stand-in while tracing."""
    original = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = fake_sdpa
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original


def _curves(allocations: list[Allocation], events: int) -> dict[str, Any]:
    import numpy as np

    diff = {name: np.zeros(events + 2) for name in CURVES}
    for allocation in allocations:
        name = allocation.category
        if name not in diff:
            continue
        end = allocation.end if allocation.end is not None else events + 1
        diff[name][allocation.start] += allocation.nbytes
        diff[name][min(end, events + 1)] -= allocation.nbytes
    return {name: np.cumsum(values)[: events + 1] for name, values in diff.items()}


def trace_step(
    mode: FakeTensorMode,
    model: torch.nn.Module,
    make_inputs: Callable[[], dict[str, Any]],
    loss_of: Callable[[Any], torch.Tensor],
    make_optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer | None],
    autocast_dtype: torch.dtype | None,
    call: Callable[[torch.nn.Module, dict[str, Any]], Any] = lambda model, inputs: model(**inputs),
    backward: bool = True,
) -> Trace:
    """Run forward, backward and one optimizer step on fake tensors and record everything.

    With `backward=False` (inference) only a no-grad forward runs.
    """
    recorder = Recorder()
    params = [p for p in model.parameters() if p.requires_grad]
    recorder.param_keys = {p.untyped_storage()._cdata for p in model.parameters()}
    spans: dict[str, tuple[int, int]] = {}
    optimizer = None
    with mode, fused_attention():
        inputs = make_inputs()
        if backward:
            optimizer = make_optimizer(params)
        recorder.preexisting = recorder.param_keys | {
            t.untyped_storage()._cdata
            for t in (*model.buffers(), *tree_flatten(inputs)[0])
            if isinstance(t, torch.Tensor)
        }
        with recorder:
            start = recorder.event
            grad_mode = contextlib.nullcontext() if backward else torch.no_grad()
            with recorder.in_phase("forward"), grad_mode:
                autocast = (
                    torch.autocast("cpu", dtype=autocast_dtype)
                    if autocast_dtype is not None
                    else contextlib.nullcontext()
                )
                with autocast:
                    output = call(model, inputs)
                loss = loss_of(output) if backward else None
            spans["forward"] = (start, recorder.event)
            start = recorder.event
            if backward:
                with recorder.in_phase("backward"):
                    assert loss is not None
                    loss.backward()
            spans["backward"] = (start, recorder.event)
            del output, loss
            start = recorder.event
            if optimizer is not None:
                with recorder.in_phase("optimizer"):
                    optimizer.step()
            spans["optimizer"] = (start, recorder.event)
        grad_keys = {p.grad.untyped_storage()._cdata for p in params if p.grad is not None}
        state_keys: set[int] = set()
        state_bytes = 0
        if optimizer is not None:
            for state in optimizer.state.values():
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        key = value.untyped_storage()._cdata
                        if key not in state_keys:
                            state_keys.add(key)
                            state_bytes += value.untyped_storage().nbytes()
        grad_bytes = sum(p.grad.untyped_storage().nbytes() for p in params if p.grad is not None)
        keyed = {id(a): key for key, a in recorder.live.items()}
    for allocation in recorder.allocations:
        key = keyed.get(id(allocation))
        if key is not None and key in grad_keys:
            allocation.category = "gradient"
        elif key is not None and key in state_keys:
            allocation.category = "optimizer_state"
        elif allocation.phase == "forward":
            allocation.category = "weight_copy" if allocation.weight_copy else "activation"
        elif allocation.phase == "backward":
            allocation.category = "backward_temp"
        elif allocation.phase == "optimizer":
            allocation.category = "optimizer_temp"
    measured = sizes(model)
    return Trace(
        grad_bytes=grad_bytes,
        state_bytes=state_bytes,
        events=recorder.event,
        ops=recorder.ops,
        curves=_curves(recorder.allocations, recorder.event),
        phase_spans=spans,
        **measured,
    )

"""Run one real training step on fake tensors under the recorder: forward, backward, optimizer.

What differs on a GPU is accounted for while tracing: attention runs as the fused kernels do
(fit/attention.py), MoE experts as grouped GEMMs with their FLOPs (fit/grouped.py), and
autocast follows CUDA's per-op cast lists, not the CPU's (fit/autocast.py), and dropout is
CUDA's one fused kernel (`fused_dropout`). Workspaces (cuBLAS, cuDNN) and the CUDA context are
added by the memory model. BatchNorm saves what cuDNN's batch norm saves in training (the input, and a per-channel
mean and inverse deviation in fp32), as the CPU kernel does: no cuDNN reserve space for a plain
batch norm without a fused activation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_flatten

from dlrig.fit.attention import fused_attention
from dlrig.fit.autocast import cuda_cast_lists
from dlrig.fit.build import block_lists
from dlrig.fit.compiled import apply as compile_pass
from dlrig.fit.grouped import grouped_gemms
from dlrig.fit.liger import liger_scope
from dlrig.fit.recorder import Recorder
from dlrig.fit.tracedata import Trace, curves_of


@contextlib.contextmanager
def fused_dropout() -> Any:
    """F.dropout as CUDA runs it: ATen's dropout takes the fused `native_dropout` kernel (the
    output and a bool mask, one pass) only for CUDA tensors (Dropout.cpp,
    is_fused_kernel_acceptable); on the CPU it decomposes into empty_like, bernoulli_, div_ and
    mul, which saves a mask in the activations' dtype and moves four times the bytes."""
    import torch.nn.functional as F

    original = F.dropout

    def dropout(
        input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
    ) -> torch.Tensor:
        if not training or not 0.0 < p < 1.0 or input.numel() == 0:
            return original(input, p, training, inplace)
        out = torch.ops.aten.native_dropout(input, p, True)[0]
        return input.copy_(out) if inplace else out

    F.dropout = dropout
    try:
        yield
    finally:
        F.dropout = original


def _compile_scope(recorder: Recorder, model: torch.nn.Module) -> list[Any]:
    """Fuse only what torchtitan compiles: each repeated block, and the loss (compiled on its
    own); the embedding, final norm and output projection stay eager. In the forward, fusion
    is on inside each block and after the output projection. In the backward (where
    checkpointed blocks run their forward again: the hooks then change nothing) it follows the
    gradients: off when the logits' gradient is made (the head's backward is eager), on when
    a block's output gets its gradient (the blocks' backward; the embedding's backward after
    them is small)."""
    blocks = [block for group in block_lists(model) for block in group]
    if not blocks:
        return []
    recorder.fusing = False

    def switch(on: bool) -> Callable[[torch.Tensor], None]:
        def hook(grad: torch.Tensor) -> None:
            recorder.fusing = on

        return hook

    def forward(on: bool, output: Any = None, then: bool | None = None) -> None:
        if recorder.phase != "forward":
            return
        recorder.fusing = on
        first = next((t for t in tree_flatten(output)[0] if isinstance(t, torch.Tensor)), None)
        if then is not None and first is not None and first.requires_grad:
            first.register_hook(switch(then))

    hooks = []
    for block in blocks:
        hooks.append(block.register_forward_pre_hook(lambda m, a: forward(True)))
        hooks.append(block.register_forward_hook(lambda m, a, out: forward(False, out, True)))
    head = getattr(model, "get_output_embeddings", lambda: None)()
    if isinstance(head, torch.nn.Module):
        hooks.append(head.register_forward_hook(lambda m, a, out: forward(True, out, False)))
    return hooks


def _bytes(params: list[torch.nn.Parameter], trainable: bool) -> int:
    return sum(p.numel() * p.element_size() for p in params if p.requires_grad == trainable)


def sizes(model: torch.nn.Module) -> dict[str, int]:
    """Parameter counts and bytes, the largest block and the root outside the blocks."""
    params = list(model.parameters())  # parameters() already skips tied duplicates
    logical = 0
    packed: set[int] = set()
    for module in model.modules():
        if hasattr(module, "logical_params"):
            logical += int(getattr(module, "logical_params"))  # noqa: B009 - set by peft.NF4Linear
            packed.update(id(p) for p in module.parameters(recurse=False) if p.dtype == torch.uint8)
    count = logical + sum(p.numel() for p in params if id(p) not in packed)
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    blocks = [block for group in block_lists(model) for block in group]
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


def _state(optimizer: Any) -> tuple[set[int], int]:
    keys: set[int] = set()
    total = 0
    if optimizer is None:
        return keys, total
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                key = value.untyped_storage()._cdata
                if key not in keys:
                    keys.add(key)
                    total += value.untyped_storage().nbytes()
    return keys, total


def trace_step(
    mode: FakeTensorMode,
    model: torch.nn.Module,
    make_inputs: Callable[[], dict[str, Any]],
    loss_of: Callable[[Any], torch.Tensor],
    make_optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer | None],
    autocast_dtype: torch.dtype | None,
    call: Callable[[torch.nn.Module, dict[str, Any]], Any] = lambda model, inputs: model(**inputs),
    backward: bool = True,
    compiled: str = "none",
) -> Trace:
    """Run forward, backward and one optimizer step on fake tensors and record everything.

    With `backward=False` (inference) only a no-grad forward runs. With `compiled` "model" the
    step is recorded as torch.compile runs it (fit/compiled.py: fused memory-bound kernels,
    pointwise results recomputed in backward rather than saved); "blocks" compiles only the
    repeated blocks (torchtitan's per-block compile): the head and the loss stay eager; "liger"
    fuses only what Liger's kernels replace (fit/liger.py).
    """
    recorder = Recorder()
    recorder.fuse = compiled != "none"
    hooks = _compile_scope(recorder, model) if compiled == "blocks" else []
    kernels = liger_scope(recorder, model) if compiled == "liger" else contextlib.nullcontext()
    params = [p for p in model.parameters() if p.requires_grad]
    recorder.param_keys = {p.untyped_storage()._cdata for p in model.parameters()}
    spans: dict[str, tuple[int, int]] = {}
    optimizer = None
    casts = cuda_cast_lists() if autocast_dtype is not None else contextlib.nullcontext()
    with mode, fused_attention(), grouped_gemms(), fused_dropout(), casts, kernels:
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
        state_keys, state_bytes = _state(optimizer)
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
    for hook in hooks:
        hook.remove()
    ops = recorder.log.table()
    if recorder.fuse:
        compile_pass(recorder.allocations, recorder.groups, spans["forward"][1], ops.traffic)
    return Trace(
        grad_bytes=grad_bytes,
        state_bytes=state_bytes,
        events=recorder.event,
        ops=ops,
        curves=curves_of(recorder.allocations, recorder.event),
        phase_spans=spans,
        **sizes(model),
    )

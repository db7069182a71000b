"""Liger's kernels in a traced step (`--activations liger`): what `apply_liger_kernel_to_*`
swaps in, each one Triton kernel for its forward and one for its backward.

Liger replaces a model's RMSNorm/LayerNorm modules, its MLP's gated activation (SwiGLU:
silu(gate) * up; GeGLU) and the module-level `apply_rotary_pos_emb` of the model's file with
fused kernels; the projections (and a LoRA's adapters inside them) stay as they are. So the
step is traced as eager PyTorch runs it, with the recorder fusing memory-bound operators only
inside those regions, by the same rules as torch.compile's fusion (fit/compiled.py: one
kernel, intermediates never in memory, pointwise results recomputed rather than saved):
- forward: a norm or MLP module's forward (less its linear layers), and each call of the
  rotary embedding;
- backward: the autograd nodes those regions made (hooks on the nodes, so the region's
  backward runs fused whatever order the engine takes; a gradient summed over two uses inside
  a region is added between nodes, so it is recorded as its own kernel), and a checkpointed
  block's recompute (module hooks fire again).

The cross-entropy Liger fuses with the output projection is not part of this: it is
`--loss-chunks` (torchtune's chunked loss keeps no whole-sequence logits either).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from dlrig.fit.recorder import Recorder

# what Liger's patches replace, matched by class name so every family's copy is found
_NORMS = ("RMSNorm", "LayerNorm")
_GATED_MLPS = ("MLP",)
ROPE = "apply_rotary_pos_emb"


def _fused_region(module: torch.nn.Module) -> bool:
    name = type(module).__name__
    if isinstance(module, torch.nn.LayerNorm) or name.endswith(_NORMS):
        return True
    # a gated MLP (gate/up/down projections): Liger's SwiGLU/GeGLU fuse its activation and
    # product; a plain MLP (GPT-2's c_fc/c_proj) has no Liger kernel beyond the GELU
    return name.endswith(_GATED_MLPS) and _gated(module)


def _gated(module: torch.nn.Module) -> bool:
    return all(hasattr(module, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn"))


def _plain_gated(module: torch.nn.Module) -> bool:
    """A gated MLP whose forward reads nothing but its four parts (transformers' Llama, Qwen,
    Mistral, Gemma MLPs): one with a norm inside or multipliers keeps its own forward."""
    forward = getattr(type(module).forward, "__code__", None)
    return (
        _gated(module)
        and forward is not None
        and set(forward.co_names) <= {"gate_proj", "up_proj", "down_proj", "act_fn"}
    )


def _gate_then_up(mlp: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    def forward(x: torch.Tensor) -> torch.Tensor:
        gate, up = mlp.gate_proj(x), mlp.up_proj(x)
        return mlp.down_proj(mlp.act_fn(gate) * up)

    return forward


def _linear(module: torch.nn.Module) -> bool:
    """Layers that keep their own kernels inside a fused region: projections (dlrig's NF4
    layer and bitsandbytes' have in/out features without being nn.Linear), and what peft wraps
    them in (a LoRA's dropout, adapters and sum run eager)."""
    return (
        isinstance(module, torch.nn.Linear)
        or hasattr(module, "base_layer")
        or (hasattr(module, "in_features") and hasattr(module, "out_features"))
    )


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(value)[0] if isinstance(t, torch.Tensor)]


def _nodes(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> list[Any]:
    """The autograd nodes between a region's inputs and its outputs."""
    stop = {id(t.grad_fn) for t in inputs if t.grad_fn is not None}
    found: dict[int, Any] = {}
    todo: list[Any] = [t.grad_fn for t in outputs if t.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node is None or id(node) in stop or id(node) in found:
            continue
        if type(node).__name__ == "AccumulateGrad":
            continue
        found[id(node)] = node
        todo.extend(next_node for next_node, _ in node.next_functions)
    return list(found.values())


class _Scope:
    """Turns the recorder's fusion on inside the regions, forward and backward."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.stack: list[bool] = []
        self.eager: set[int] = set()  # nodes of linear layers inside the open regions

    def enter(self, fused: bool) -> None:
        self.stack.append(self.recorder.fusing)
        self.recorder.fusing = fused

    def exit(self) -> None:
        self.recorder.fusing = self.stack.pop()

    def leave(self, outputs: Any, inputs: Any, fused: bool) -> None:
        self.exit()
        if self.recorder.phase != "forward":
            return  # a checkpointed block's recompute: its nodes never run backward
        nodes = _nodes(_tensors(outputs), _tensors(inputs))
        if not fused:
            self.eager.update(id(node) for node in nodes)
            return
        for node in nodes:
            if id(node) not in self.eager:
                node.register_prehook(self._backward_on)
                node.register_hook(self._backward_off)
        if not self.stack:
            self.eager.clear()

    def _backward_on(self, grad_outputs: Any) -> None:
        self.stack.clear()  # no forward (or recompute) is open between backward nodes
        self.recorder.fusing = True

    def _backward_off(self, grad_inputs: Any, grad_outputs: Any) -> None:
        # A gradient summed over two uses inside a region is added after this hook: recorded
        # as its own kernel (Liger's backward sums it inside the kernel).
        self.stack.clear()
        self.recorder.fusing = False

    def wrap(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def fused(*args: Any, **kwargs: Any) -> Any:
            self.enter(True)
            out = None
            try:
                out = function(*args, **kwargs)
            finally:
                self.leave(out, (args, kwargs), True)
            return out

        return fused


@contextlib.contextmanager
def liger_scope(recorder: Recorder, model: torch.nn.Module) -> Iterator[None]:
    """Record the step as Liger's kernels run it (see the module's docstring)."""
    scope = _Scope(recorder)
    recorder.fuse = True
    recorder.fusing = False
    regions = [m for m in model.modules() if _fused_region(m)]
    with contextlib.ExitStack() as undo:
        for region in regions:
            for module, fused in (
                (region, True),
                *((m, False) for m in region.modules() if _linear(m)),
            ):
                undo.callback(
                    module.register_forward_pre_hook(
                        lambda m, a, k, f=fused: scope.enter(f), with_kwargs=True
                    ).remove
                )
                undo.callback(
                    module.register_forward_hook(
                        lambda m, a, k, out, f=fused: scope.leave(out, (a, k), f),
                        with_kwargs=True,
                    ).remove
                )
        # A checkpointed block recomputes its forward inside the backward node that needs it,
        # whose hooks turned fusion on: outside the regions that recompute is eager again. It
        # stops early (torch raises once the last saved tensor is back), leaving its modules'
        # exit hooks unrun: the next backward node's hooks start from a clean stack.
        hooked = {id(m) for region in regions for m in region.modules()}

        def recompute_enter(module: torch.nn.Module, args: Any) -> None:
            if recorder.phase == "backward" and id(module) not in hooked:
                scope.enter(False)

        def recompute_exit(module: torch.nn.Module, args: Any, out: Any) -> None:
            if recorder.phase == "backward" and id(module) not in hooked:
                scope.exit()

        undo.callback(
            torch.nn.modules.module.register_module_forward_pre_hook(recompute_enter).remove
        )
        undo.callback(torch.nn.modules.module.register_module_forward_hook(recompute_exit).remove)
        # Liger's SwiGLU/GeGLU module runs both projections, then one kernel for act(gate) *
        # up (transformers' forward runs the activation between them: two kernels, one
        # intermediate); only an MLP whose forward is that product and nothing else
        for mlp in (m for m in regions if _plain_gated(m)):
            undo.callback(_restore_forward, mlp, mlp.__dict__.get("forward"))
            mlp.forward = _gate_then_up(mlp)
        # the rotary embedding is a function of the model's file, called from its attention
        files = {sys.modules.get(type(m).__module__) for m in model.modules()}
        for file in files:
            function = getattr(file, ROPE, None)
            if callable(function):
                undo.callback(setattr, file, ROPE, function)
                setattr(file, ROPE, scope.wrap(function))
        yield


def _restore_forward(module: torch.nn.Module, forward: Any) -> None:
    if forward is None:
        del module.forward
    else:
        module.forward = forward

"""Activation checkpointing and torch.compile, each one switch and one line saying what it did.

Activation checkpointing recomputes a block's forward during backward instead of keeping its
activations: memory for time (about a third more compute). It wraps the repeated blocks of the
model: the modules of the given types, or else the children of the model's largest
`nn.ModuleList` (the transformer layers, the ResNet stages), which is where the memory is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.checkpoint import checkpoint

from dlrig.errors import InputError
from dlrig.train.log import RunLog


class Checkpointed(torch.nn.Module):
    """Runs `inner` under `torch.utils.checkpoint` (non-reentrant) while training."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not self.training or not torch.is_grad_enabled():
            return self.inner(*args, **kwargs)
        return checkpoint(self.inner, *args, use_reentrant=False, **kwargs)


def _largest_module_list(model: torch.nn.Module) -> tuple[str, torch.nn.ModuleList] | None:
    best: tuple[str, torch.nn.ModuleList] | None = None
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) > 0:
            size = sum(p.numel() for p in module.parameters())
            if best is None or size > sum(p.numel() for p in best[1].parameters()):
                best = (name, module)
    return best


def apply_activation_checkpointing(
    model: torch.nn.Module, setting: bool | Sequence[type[torch.nn.Module]], log: RunLog
) -> int:
    """Wrap the blocks; the number wrapped (0 when off)."""
    if setting is False:
        return 0
    if setting is True:
        found = _largest_module_list(model)
        if found is None:
            raise InputError(
                "activation_checkpointing=True: the model has no nn.ModuleList of blocks to wrap",
                fix="pass the block types instead: activation_checkpointing=(MyBlock,)",
            )
        name, blocks = found
        for index, block in enumerate(blocks):
            blocks[index] = Checkpointed(block)
        kind = type(blocks[0].inner).__name__ if len(blocks) else "?"
        log.decide(
            "activation_checkpointing",
            f"activation checkpointing on the {len(blocks)} blocks of {name or 'the model'} "
            f"({kind}): activations recomputed in backward",
        )
        return len(blocks)
    types = tuple(setting)
    count = 0
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, types) and not isinstance(parent, Checkpointed):
                setattr(parent, child_name, Checkpointed(child))
                count += 1
    if count == 0:
        names = ", ".join(t.__name__ for t in types)
        raise InputError(
            f"activation_checkpointing=({names},): no module of those types in the model",
            fix="name the model's block class (print(model) shows it)",
        )
    log.decide(
        "activation_checkpointing",
        f"activation checkpointing on {count} modules ({', '.join(t.__name__ for t in types)})",
    )
    return count


def apply_compile(model: torch.nn.Module, setting: bool | str, log: RunLog) -> torch.nn.Module:
    """torch.compile the model (`setting` may name the backend); the first steps compile."""
    if setting is False:
        return model
    backend = "inductor" if setting is True else str(setting)
    compiled = torch.compile(model, backend=backend)
    log.decide(
        "compile",
        f"torch.compile(backend={backend!r}): the first steps are slower while it compiles",
    )
    return compiled  # type: ignore[return-value]

"""Mixture-of-experts GEMMs for the fake-tensor trace.

transformers runs MoE experts as grouped GEMMs by default (`experts_implementation="grouped_mm"`:
tokens sorted by expert, one `grouped_mm` over all experts with per-expert row offsets), which
has static shapes and so traces. PyTorch has no FLOP formula for it and its CPU meta kernel
accepts only bf16, while a run under autocast with fp32 master weights hands it fp32 weights.
`grouped_gemms()` routes `F.grouped_mm` / `torch._grouped_mm` to `dlrig_fit::grouped_mm`, an op
with the same shapes in any float dtype whose FLOPs are 2·S·K·N (S = tokens × experts per
token): what the GPU computes whatever the routing, since every selected token-expert pair is
one row of the grouped GEMM.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

FORWARD = "dlrig_fit.grouped_mm"
WEIGHT_GRAD = "dlrig_fit.grouped_mm_weight_grad"


@torch.library.custom_op("dlrig_fit::grouped_mm", mutates_args=())
def _grouped_mm(x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("dlrig_fit::grouped_mm only runs on fake tensors")


@_grouped_mm.register_fake
def _grouped_mm_fake(x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], weight.shape[-1]))


@torch.library.custom_op("dlrig_fit::grouped_mm_weight_grad", mutates_args=())
def _weight_grad(
    x: torch.Tensor, grad: torch.Tensor, offs: torch.Tensor, experts: int
) -> torch.Tensor:
    raise RuntimeError("dlrig_fit::grouped_mm_weight_grad only runs on fake tensors")


@_weight_grad.register_fake
def _weight_grad_fake(
    x: torch.Tensor, grad: torch.Tensor, offs: torch.Tensor, experts: int
) -> torch.Tensor:
    return x.new_empty((experts, x.shape[-1], grad.shape[-1]))


def _setup(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    x, weight, offs = inputs
    ctx.save_for_backward(x, weight, offs)


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
    x, weight, offs = ctx.saved_tensors
    grad_x = _grouped_mm(grad, weight.transpose(-2, -1), offs) if x.requires_grad else None
    grad_w = _weight_grad(x, grad, offs, weight.shape[0]) if weight.requires_grad else None
    return grad_x, grad_w, None


_grouped_mm.register_autograd(_backward, setup_context=_setup)


def op_flops(name: str, args: tuple[Any, ...]) -> float | None:
    """2·S·K·N for the grouped GEMMs (None for any other op)."""
    if name == FORWARD:
        x, weight = args[0], args[1]
        return 2.0 * x.shape[0] * x.shape[-1] * weight.shape[-1]
    if name == WEIGHT_GRAD:
        x, grad = args[0], args[1]
        return 2.0 * x.shape[0] * x.shape[-1] * grad.shape[-1]
    return None


def _stand_in(original: Any) -> Any:
    def grouped_mm(mat_a: torch.Tensor, mat_b: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        offs = kwargs.get("offs", args[0] if args else None)
        if offs is None or mat_a.dim() != 2 or mat_b.dim() != 3:
            return original(mat_a, mat_b, *args, **kwargs)
        # a grouped GEMM runs on tensor cores in the autocast dtype, like every other matmul
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else mat_a.dtype
        return _grouped_mm(mat_a.to(dtype), mat_b.to(dtype), offs)

    return grouped_mm


@contextlib.contextmanager
def grouped_gemms() -> Iterator[None]:
    """Route grouped GEMMs to the dtype-agnostic stand-in while tracing."""
    saved: list[tuple[Any, str, Any]] = []
    for owner, name in ((torch.nn.functional, "grouped_mm"), (torch, "_grouped_mm")):
        original = getattr(owner, name, None)
        if original is not None:
            saved.append((owner, name, original))
            setattr(owner, name, _stand_in(original))
    try:
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)

"""Attention as the GPU's fused kernels run it, for the fake-tensor trace.

`F.scaled_dot_product_attention` is routed to `dlrig_fit::attention`, an op with the memory
and FLOPs of flash / memory-efficient attention: the output and a float32 log-sum-exp per query
are saved for backward, never the S×S score matrix, so the CPU's kernel choice does not leak
into the estimate. Its backward recomputes the scores blockwise (2.5× the forward FLOPs).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch


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
    grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *saved: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # The gradients have the inputs' shapes; what forward saved (out, lse, causal) is unused.
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

FORWARD = "dlrig_fit.attention"
BACKWARD = "dlrig_fit.attention_backward"
BACKWARD_FLOPS_FACTOR = 2.5  # flash backward: dS, dP, dQ, dK, dV plus the recomputed QKᵀ


def attention_flops(
    q_shape: tuple[int, ...], k_shape: tuple[int, ...], v_shape: tuple[int, ...], causal: bool
) -> float:
    """Forward FLOPs of attention: QKᵀ and PV, halved for causal masks (flash skips them)."""
    batch_heads = math.prod(q_shape[:-2])
    sq, d = q_shape[-2], q_shape[-1]
    sk, dv = k_shape[-2], v_shape[-1]
    flops = 2.0 * batch_heads * sq * sk * (d + dv)
    return flops * (0.5 if causal and sq == sk else 1.0)


def op_flops(name: str, args: tuple[Any, ...]) -> float | None:
    """FLOPs of the fused attention ops (None for any other op)."""
    if name == FORWARD:
        q, k, v, causal = args[:4]
        return attention_flops(tuple(q.shape), tuple(k.shape), tuple(v.shape), bool(causal))
    if name == BACKWARD:
        q, k, v = args[1:4]
        forward = attention_flops(tuple(q.shape), tuple(k.shape), tuple(v.shape), bool(args[6]))
        return BACKWARD_FLOPS_FACTOR * forward
    return None


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
    # SDPA is on autocast's lower-precision list (CUDA's and the CPU's): inputs are cast first.
    if torch.is_autocast_enabled("cpu"):
        dtype = torch.get_autocast_dtype("cpu")
        query, key, value = (t.to(dtype) for t in (query, key, value))
    # grouped-query attention (enable_gqa): the fused kernels read each KV head for its query
    # group without copies, so k and v keep their own head count; FLOPs follow the query heads
    out, _lse = _attention(query, key, value, bool(is_causal))
    return out


@contextlib.contextmanager
def fused_attention() -> Iterator[None]:
    """Route F.scaled_dot_product_attention to the fused-kernel stand-in while tracing."""
    original = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = fake_sdpa
    try:
        with unpacked_sequences():
            yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original


@contextlib.contextmanager
def unpacked_sequences() -> Iterator[None]:
    """The traced batch holds whole sequences, one per row. Without a KV cache (use_cache off,
    as gradient checkpointing sets it) transformers looks for packed sequences in the position
    ids; it cannot read fake ones, so it would build a dense mask and lose `is_causal`: the
    causal attention would be traced as full, twice its FLOPs. A real run reads its positions
    and finds no packing."""
    try:
        from transformers import masking_utils
    except ImportError:
        yield
        return
    found = getattr(masking_utils, "find_packed_sequence_indices", None)
    if found is None:
        yield
        return
    masking_utils.find_packed_sequence_indices = lambda *args, **kwargs: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = found

"""LoRA through `peft` on the real model, and QLoRA's 4-bit NF4 base.

LoRA: `peft.get_peft_model` wraps the target modules exactly as a user's run does; the frozen
base has no gradients and no optimizer state because nothing asks for them.

QLoRA (Dettmers et al. 2023, as bitsandbytes implements it): every frozen `nn.Linear` except the
output head holds its weight as 4-bit NF4 codes (two per byte) with one absmax per 64-weight
block; double quantisation stores those absmaxes as 8-bit codes with an fp32 scale per 256
blocks. Each forward and backward dequantises the weight into a transient compute-dtype copy
(bitsandbytes' `MatMul4Bit`), so the trace sees the working copies come and go. Adapters train
in fp32 (peft's `autocast_adapter_dtype`) under bf16/fp16 autocast. The usual Hugging Face recipe
calls `peft.prepare_model_for_kbit_training` first, which casts the frozen weights that stay
16-bit (embeddings, output head, norms) to fp32: on by default (`kbit_prepare`), off for
trainers that skip it (LitGPT, torchtune).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from dlrig.errors import InputError, MissingExtraError

NF4_BLOCK = 64
DQ_BLOCK = 256


@torch.library.custom_op("dlrig_fit::nf4_dequantize", mutates_args=())
def nf4_dequantize(
    packed: torch.Tensor, absmax: torch.Tensor, rows: int, cols: int, dtype: torch.dtype
) -> torch.Tensor:
    raise RuntimeError("dlrig_fit::nf4_dequantize only runs on fake tensors")


@nf4_dequantize.register_fake
def _nf4_dequantize_fake(
    packed: torch.Tensor, absmax: torch.Tensor, rows: int, cols: int, dtype: torch.dtype
) -> torch.Tensor:
    return packed.new_empty((rows, cols), dtype=dtype)


class _NF4Matmul(torch.autograd.Function):
    """x @ dequant(W)ᵀ with the weight dequantised again for the input gradient."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, packed: torch.Tensor, absmax: torch.Tensor, rows: int, cols: int
    ) -> Any:
        weight = nf4_dequantize(packed, absmax, rows, cols, x.dtype)
        # bitsandbytes' MatMul4Bit keeps its input for backward whenever the input needs a
        # gradient (ctx.tensors = (A, B)), though only the weight is needed for it
        ctx.save_for_backward(x, packed, absmax)
        ctx.shape = (rows, cols)
        return torch.nn.functional.linear(x, weight)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> Any:
        _x, packed, absmax = ctx.saved_tensors
        weight = nf4_dequantize(packed, absmax, ctx.shape[0], ctx.shape[1], grad.dtype)
        return grad @ weight, None, None, None, None


def nf4_bytes_per_weight(double_quant: bool = True) -> float:
    if double_quant:
        return 0.5 + 1 / NF4_BLOCK + 4 / (NF4_BLOCK * DQ_BLOCK)
    return 0.5 + 4 / NF4_BLOCK


class NF4Linear(torch.nn.Module):
    """A frozen Linear stored as bitsandbytes stores `Linear4bit` (NF4; absmaxes double
    quantised, or one fp32 absmax per block without double quantisation)."""

    def __init__(
        self, linear: torch.nn.Linear, compute_dtype: torch.dtype, double_quant: bool = True
    ) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        count = self.in_features * self.out_features
        blocks = math.ceil(count / NF4_BLOCK)
        self.weight = torch.nn.Parameter(
            torch.empty(math.ceil(count / 2), dtype=torch.uint8), requires_grad=False
        )
        # 8-bit absmax codes + an fp32 scale per 256 blocks, or 4 bytes per block, as one byte
        # buffer
        absmax_bytes = blocks + 4 * math.ceil(blocks / DQ_BLOCK) if double_quant else 4 * blocks
        self.absmax = torch.nn.Parameter(
            torch.empty(absmax_bytes, dtype=torch.uint8), requires_grad=False
        )
        self.bias = linear.bias
        if self.bias is not None:
            self.bias.requires_grad_(False)
        self.compute_dtype = compute_dtype
        self.logical_params = count

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = _NF4Matmul.apply(
            x.to(self.compute_dtype), self.weight, self.absmax, self.out_features, self.in_features
        )
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out


def _quantise_frozen_linears(
    model: torch.nn.Module, compute_dtype: torch.dtype, double_quant: bool = True
) -> int:
    """Swap every frozen Linear but the output head for NF4 (transformers' bnb loading keeps
    the head in 16 bits). Subclasses of Linear count too, as transformers' replace_with_bnb_linear
    checks isinstance (Falcon's FalconLinear is one). Returns the number of weights quantised."""
    getter = getattr(model, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    swapped = 0
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if (
                isinstance(child, torch.nn.Linear)
                and child is not head
                and not child.weight.requires_grad
            ):
                setattr(parent, child_name, NF4Linear(child, compute_dtype, double_quant))
                swapped += child.in_features * child.out_features
    return swapped


def _fake_safe_to(module: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
    _device, dtype, _blocking, _format = torch._C._nn._parse_to(*args, **kwargs)
    if dtype is not None and dtype.is_floating_point:
        for owner in module.modules():
            for name, param in list(owner.named_parameters(recurse=False)):
                if param.is_floating_point() and param.dtype != dtype:
                    fresh = torch.nn.Parameter(
                        torch.empty(param.shape, dtype=dtype), requires_grad=param.requires_grad
                    )
                    setattr(owner, name, fresh)
    return module


def _adapters_to_fp32(model: torch.nn.Module) -> None:
    """peft's autocast_adapter_dtype, done by replacing the parameters: `.to()` on a fake
    module cannot swap tensors in place."""
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if param.requires_grad and param.dtype != torch.float32:
                fresh = torch.nn.Parameter(torch.empty(param.shape, dtype=torch.float32))
                setattr(module, name, fresh)


def _upcast_frozen(model: torch.nn.Module) -> None:
    """peft's prepare_model_for_kbit_training: every frozen 16-bit parameter that is not a
    4-bit code (embeddings, output head, norms) is cast to fp32."""
    made: dict[int, torch.nn.Parameter] = {}  # tied weights (embeddings = head) stay tied
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            if not param.requires_grad and param.dtype in (torch.bfloat16, torch.float16):
                if id(param) not in made:
                    made[id(param)] = torch.nn.Parameter(
                        torch.empty(param.shape, dtype=torch.float32), requires_grad=False
                    )
                setattr(module, name, made[id(param)])


def apply(model: torch.nn.Module, workload: Any, options: Any) -> torch.nn.Module:
    """LoRA (or QLoRA) adapters on `model`, as peft builds them."""
    try:
        import peft
    except ImportError:
        raise MissingExtraError("peft", "torch", "dlrig fit --lora/--qlora") from None
    rank = options.lora or options.qlora
    targets: Any = None
    if options.lora_targets:
        targets = (
            "all-linear"
            if options.lora_targets == "all-linear"
            else [t.strip() for t in options.lora_targets.split(",") if t.strip()]
        )
    task = "CAUSAL_LM" if workload.task == "causal_lm" else None

    def config(target_modules: Any) -> Any:
        return peft.LoraConfig(
            r=rank,
            lora_alpha=options.lora_alpha or 2 * rank,
            lora_dropout=options.lora_dropout,
            target_modules=target_modules,
            # whole modules trained beside the adapters (a new token's embed_tokens, lm_head):
            # peft keeps a trainable copy of each, with its gradients and optimizer state
            modules_to_save=_names(options.modules_to_save),
            task_type=task,
        )

    # peft moves each new adapter to its base layer's device and dtype with `.to()`, which
    # cannot swap fake tensors in place: everything here is on one (fake) device, so a move
    # is a no-op and a dtype change makes new parameters.
    original = torch.nn.Module.to
    torch.nn.Module.to = _fake_safe_to  # type: ignore[method-assign,assignment]
    try:
        wrapped = _wrap(peft, model, config, targets, options, workload)
    finally:
        torch.nn.Module.to = original  # type: ignore[method-assign]
    if options.precision not in ("bf16", "fp16"):
        _adapters_to_fp32(wrapped)
    if options.qlora:
        compute = torch.float16 if options.precision in ("amp-fp16", "fp16") else torch.bfloat16
        if _quantise_frozen_linears(wrapped, compute, options.double_quant) == 0:
            raise InputError(
                f"--qlora: {workload.name} has no frozen Linear layers to quantise",
                fix="use --lora instead",
            )
        if options.kbit_prepare:
            _upcast_frozen(wrapped)
    return wrapped


def _names(text: str | None) -> list[str] | None:
    names = [t.strip() for t in (text or "").split(",") if t.strip()]
    return names or None


def _wrap(
    peft: Any, model: torch.nn.Module, config: Any, targets: Any, options: Any, workload: Any
) -> torch.nn.Module:
    try:
        return peft.get_peft_model(model, config(targets), autocast_adapter_dtype=False)
    except ValueError as exc:
        if options.modules_to_save and "modules_to_save" in str(exc).lower():
            raise InputError(
                f"--modules-to-save {options.modules_to_save}: {str(exc).splitlines()[0][:200]}",
                fix="name modules the model has (e.g. embed_tokens,lm_head)",
            ) from None
        if targets is not None:
            raise InputError(
                f"--lora-targets {options.lora_targets}: {str(exc).splitlines()[0][:200]}",
                fix="name modules the model has (e.g. q_proj,v_proj) or use all-linear",
            ) from None
        # peft has no default targets for this family: train every linear layer
        workload.notes.append("peft has no default LoRA targets for this model: all-linear used")
        return peft.get_peft_model(model, config("all-linear"), autocast_adapter_dtype=False)

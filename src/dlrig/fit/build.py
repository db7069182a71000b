"""Build the real model on fake tensors, as the run would hold it: precision, checkpointing, PEFT."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from dlrig.errors import InputError
from dlrig.fit import checkpointing


@contextlib.contextmanager
def skip_weight_init() -> Iterator[None]:
    """Skip weight initialisation while building: fake tensors have no values to initialise,
    and some initialisers read values back (`.item()`), which fake tensors cannot answer."""
    import torch

    names = [n for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")]
    saved = {n: getattr(torch.nn.init, n) for n in names}
    for name in names:
        setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
    hf_context: Any = contextlib.nullcontext()
    try:
        from transformers.initialization import no_init_weights

        hf_context = no_init_weights()
    except ImportError:
        pass
    try:
        with hf_context:
            yield
    finally:
        for name, function in saved.items():
            setattr(torch.nn.init, name, function)


@contextlib.contextmanager
def default_dtype(dtype: Any) -> Iterator[None]:
    """Build parameters directly in `dtype`: converting a built fake model with .to() breaks
    tied weights."""
    import torch

    if dtype is None:
        yield
        return
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def storage_dtype(precision: str, peft: bool) -> Any:
    """The dtype parameters are created in. Pure bf16/fp16 train in 16 bits (fp16: model.half()
    or apex amp O2's fp16 model); a PEFT base is frozen in the compute dtype (as
    `from_pretrained(torch_dtype=...)` loads it) with fp32 adapters."""
    import torch

    if precision == "bf16" or (peft and precision == "amp-bf16"):
        return torch.bfloat16
    if precision == "fp16" or (peft and precision == "amp-fp16"):
        return torch.float16
    return None


def make_optimizer(name: str, impl: str = "foreach") -> Callable[[list[Any]], Any]:
    """The optimizer the step runs; `impl` picks torch's foreach, per-parameter or fused step
    (their temporaries differ: parameter-sized, one parameter's, none)."""
    import torch

    foreach, fused = impl == "foreach", (True if impl == "fused" else None)

    def factory(params: list[Any]) -> Any:
        if not params:
            return None
        if name == "sgd":
            return torch.optim.SGD(params, lr=0.1, foreach=foreach, fused=fused)
        if name == "sgd-momentum":
            return torch.optim.SGD(params, lr=0.1, momentum=0.9, foreach=foreach, fused=fused)
        if name == "adam":
            return torch.optim.Adam(params, lr=1e-4, foreach=foreach, fused=fused)
        if name in ("adamw", "adamw-8bit", "paged-adamw", "paged-adamw-8bit"):
            # 8-bit state is sized analytically; the traced fp32 step stands in for its kernels
            return torch.optim.AdamW(params, lr=1e-4, foreach=foreach, fused=fused)
        from transformers.optimization import Adafactor

        return Adafactor(params, lr=1e-4, scale_parameter=False, relative_step=False)

    return factory


def selective_policy() -> Any:
    """torchtitan's op-level selective checkpointing: keep every other matmul and the attention
    outputs, recompute the rest."""
    import torch
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = {
        torch.ops.aten.mm.default,
        torch.ops.aten.addmm.default,
        torch.ops.dlrig_fit.attention.default,
        torch.ops.aten.max.default,
    }

    def context() -> Any:
        counts = {"forward": 0, "recompute": 0}

        def policy(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> Any:
            mode = "recompute" if ctx.is_recompute else "forward"
            if op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
                counts[mode] += 1
                if counts[mode] % 2 == 0:
                    return CheckpointPolicy.PREFER_RECOMPUTE
            return CheckpointPolicy.MUST_SAVE if op in save else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return context


def enable_checkpointing(model: Any, mode: str, name: str, blocks: float = 1.0) -> None:
    if mode == "none":
        return
    enable = getattr(model, "gradient_checkpointing_enable", None)
    if enable is None:
        raise InputError(
            f"{name}: cannot turn on gradient checkpointing for a plain nn.Module",
            fix="drop --grad-checkpointing, or wrap the blocks with torch.utils.checkpoint yourself",
        )
    kwargs: dict[str, Any] = {"use_reentrant": False}
    if mode == "selective":
        kwargs["context_fn"] = selective_policy()
    try:
        enable(gradient_checkpointing_kwargs=kwargs)
    except ValueError as exc:
        raise InputError(f"{name}: {exc}", fix="drop --grad-checkpointing for this model") from None
    if blocks != 1.0:
        checkpoint_some(model, blocks, name)


def checkpoint_some(model: Any, blocks: float, name: str) -> None:
    """Leave checkpointing on only in the chosen fraction of the model's checkpointable layers,
    counted in order over the whole model as transformers' `every_n_layers` and fms-fsdp count
    them. transformers checkpoints a layer through its own `gradient_checkpointing` flag
    (GradientCheckpointingLayer); where such layers nest (Swin's stages hold its layers) the
    innermost are the units, and an outer one stops checkpointing so that they decide. A model
    that decides for all its blocks at once cannot checkpoint some of them."""
    kinds: tuple[type, ...] = ()
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer

        kinds = (GradientCheckpointingLayer,)
    except ImportError:  # transformers < 4.52: no per-layer flag
        pass
    layers: list[Any] = [m for m in model.modules() if isinstance(m, kinds)]
    ids = {id(m) for m in layers}
    inner = {id(m) for m in layers if not any(id(c) in ids for c in m.modules() if c is not m)}
    units = [m for m in layers if id(m) in inner]
    if len(units) < 2:
        raise InputError(
            f"{name}: its blocks are not checkpointed one by one, so a fraction of them cannot be",
            fix="drop --checkpoint-blocks (checkpoint every block)",
        )
    for layer in layers:
        if id(layer) not in inner:
            layer.gradient_checkpointing = False
    for layer, keep in zip(units, checkpointing.pattern(len(units), blocks), strict=True):
        layer.gradient_checkpointing = keep


def block_lists(model: Any) -> list[list[Any]]:
    """Every outermost list of repeated blocks (a T5's encoder and decoder blocks, a ResNet's
    stages): ModuleLists and Sequentials of two or more modules with parameters, not inside
    another such list. It does not depend on the traced depth, and it is what FSDP wraps one by
    one (every block of every list, the rest in the root unit). A model that is itself a
    Sequential (embedding, blocks, head) is not its own list of blocks unless nothing inside
    it is one."""
    inner = _lists_below(model, skip_root=True)
    return inner if inner else _lists_below(model, skip_root=False)


def _lists_below(model: Any, skip_root: bool) -> list[list[Any]]:
    import torch

    lists: list[list[Any]] = []
    inside: set[int] = set()
    for module in model.modules():
        if id(module) in inside or (skip_root and module is model):
            continue
        if isinstance(module, torch.nn.ModuleList | torch.nn.Sequential) and len(module) > 1:
            children = [c for c in module if any(True for _ in c.parameters())]
            if len(children) > 1:
                lists.append(children)
                inside.update(id(m) for c in children for m in c.modules())
    return lists


def check_positions(model: Any, workload: Any) -> None:
    """A learned position table shorter than the sequence (found on the built model, so any
    family with one is caught, not only the presets)."""
    import torch

    config = workload.config
    limit = getattr(config, "max_position_embeddings", None) if config is not None else None
    if not isinstance(limit, int) or workload.seq_len is None:
        return
    for module_name, module in model.named_modules():
        if (
            isinstance(module, torch.nn.Embedding)
            and 0 <= module.num_embeddings - limit <= 2
            and workload.seq_len > limit
            and module.num_embeddings != getattr(config, "vocab_size", None)
        ):
            raise InputError(
                f"--seq-len {workload.seq_len}: {workload.name} has a learned position table "
                f"({module_name}) of {limit} positions",
                fix=f"use --seq-len {limit} or less",
            )


# transformers' tanh-approximated GELUs written as chains of elementwise ops (each op keeps its
# input for backward: about five intermediate-sized tensors a layer); torch's
# GELU(approximate="tanh") is the same function as one kernel that keeps only its input
COMPOSITE_GELUS = ("NewGELUActivation", "FastGELUActivation", "AccurateGELUActivation")


def fuse_activations(model: Any) -> int:
    """Swap the composite GELUs for the one-kernel GELU, as LitGPT's and torchtune's model code,
    Liger and transformers' hub kernels run them. Returns how many modules were swapped."""
    import torch

    swapped = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child).__name__ in COMPOSITE_GELUS:
                setattr(parent, name, torch.nn.GELU(approximate="tanh"))
                swapped += 1
    return swapped


def build_model(workload: Any, options: Any, depth: int | None) -> Any:
    """The model as it trains: built on fake tensors at `depth` layers, PEFT applied, in train mode."""
    from dlrig.fit import peft as peft_support  # lazy: torch and peft (the torch extra)

    peft_rank = options.lora or options.qlora
    dtype = storage_dtype(options.precision, bool(peft_rank))
    with skip_weight_init(), default_dtype(dtype):
        model = workload.build(depth)
        if options.activations in ("fused", "liger"):
            fuse_activations(model)
        if peft_rank:
            model = peft_support.apply(model, workload, options)
    check_positions(model, workload)
    model.train()
    enable_checkpointing(
        model, options.grad_checkpointing, workload.name, options.checkpoint_blocks
    )
    return model

"""ANALYTIC ESTIMATES: parameters, gradients, optimizer state (and KV cache), no timeline.

Two uses: a model whose step cannot be traced (sizes from the built model), and `--analytic`,
which reads only config.json and never imports torch, so it answers as fast as
`accelerate estimate-memory`. Decoder-only families are counted from the config's standard keys
(embeddings, attention with grouped KV heads, gated or plain MLP, experts, norms, head).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlrig.errors import InputError
from dlrig.fit import hardware, hfconfig
from dlrig.fit.context import Context, require_fp8, sharded_full
from dlrig.fit.inference import kv_cache_bytes, weight_bytes
from dlrig.fit.presets import presets
from dlrig.fit.result import FitResult
from dlrig.fit.sharding import Plan, Sizes, held

if TYPE_CHECKING:
    from dlrig.fit.tracing import TracedWorkload

LABEL = "ANALYTIC ESTIMATE: parameters, gradients and optimizer state only; activations are NOT included"


def _breakdown(sizes: Sizes, ctx: Context) -> dict[str, int]:
    o = ctx.options
    h = held(
        sizes, Plan(o.strategy, o.gpus, o.gpus_per_node, ctx.precision, o.optimizer, o.offload)
    )
    m = sizes.trainable_bytes / sizes.trainable_count if sizes.trainable_count else 4.0
    grads = m * sizes.trainable_count * h.gradient_scale * (sizes.trainable_bytes and 1)
    return {
        "parameters": int(h.parameters),
        "gradients": int(grads),
        "optimizer_state": int(h.optimizer_state),
    }


def _result(
    name: str,
    sizes: Sizes,
    ctx: Context,
    batch: int,
    seq: int | None,
    image: int | None,
    notes: list[str],
    extra: dict[str, int] | None = None,
    inference: dict[str, Any] | None = None,
) -> FitResult:
    breakdown = _breakdown(sizes, ctx) if extra is None else extra
    total = sum(breakdown.values())
    o = ctx.options
    return FitResult(
        model=name,
        method="analytic",
        gpu=ctx.spec.id,
        gpu_memory_bytes=ctx.memory_bytes,
        params=sizes.param_count,
        trainable_params=sizes.trainable_count,
        batch_size=batch,
        seq_len=seq,
        image_size=image,
        memory_peak_bytes=total,
        memory_breakdown=breakdown,
        fits=total <= ctx.memory_bytes,
        margin_bytes=ctx.memory_bytes - total,
        setup={
            "batch_size": batch,
            "precision": ctx.precision,
            "optimizer": o.optimizer,
            "grad_checkpointing": o.grad_checkpointing,
            "checkpoint_blocks": o.checkpointed_fraction or None,
            "grad_accum": o.grad_accum,
            "gpus": o.gpus,
            "strategy": o.strategy,
            "gpu": ctx.spec.id,
            "compile": o.compile,
            "fp8": o.fp8,
            "loss_chunks": o.loss_chunks,
        },
        assumptions=(
            LABEL
            if inference is None
            else LABEL.replace("gradients and optimizer state", "KV cache"),
            f"precision {ctx.precision} ({ctx.precision_why})",
        ),
        notes=tuple(notes),
        inference=inference,
    )


def from_sizes(traced: TracedWorkload, ctx: Context) -> FitResult:
    w = traced.workload
    return _result(w.name, traced.sizes, ctx, traced.batch, w.seq_len, w.image_size, traced.notes)


def count_decoder(config: dict[str, Any]) -> dict[str, int]:
    """Parameters of a decoder-only transformer from config.json keys (no torch)."""
    text = config.get("text_config") or config
    get = text.get
    hidden = int(get("hidden_size") or get("n_embd") or get("d_model") or 0)
    layers = int(get("num_hidden_layers") or get("n_layer") or 0)
    heads = int(get("num_attention_heads") or get("n_head") or 0)
    vocab = int(get("vocab_size") or 0)
    if not (hidden and layers and heads and vocab):
        raise InputError(
            f"model_type {config.get('model_type')!r}: --analytic counts decoder-only configs "
            "(hidden_size, num_hidden_layers, num_attention_heads, vocab_size)",
            fix="drop --analytic: the traced estimate builds any transformers model",
        )
    kv = hfconfig.kv_heads(text, heads)
    head_dim = int(get("head_dim") or hidden // heads)
    inter = int(get("intermediate_size") or get("n_inner") or 4 * hidden)
    bias = bool(get("attention_bias") or get("qkv_bias") or config.get("model_type") == "qwen2")
    attention = hidden * head_dim * (heads + 2 * kv) + heads * head_dim * hidden
    attention += head_dim * (heads + 2 * kv) if bias else 0
    act = str(get("hidden_act") or get("activation_function") or "")
    gated = act in ("silu", "swiglu", "gelu_pytorch_tanh") or "gate" in str(get("mlp_type", ""))
    gated = gated or config.get("model_type") in (
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen3",
        "gemma",
        "gemma2",
        "gemma3_text",
        "phi3",
    )
    mlp = (3 if gated else 2) * hidden * inter
    experts = int(get("num_local_experts") or get("num_experts") or 1)
    moe = experts * mlp + (hidden * experts if experts > 1 else 0)
    per_layer = attention + moe + 2 * hidden
    embed = vocab * hidden
    head = 0 if get("tie_word_embeddings", True) else vocab * hidden
    total = embed + layers * per_layer + hidden + head
    return {
        "params": total,
        "layers": layers,
        "kv_heads": kv,
        "head_dim": head_dim,
        "hidden": hidden,
        "active_params": total - layers * (experts - int(get("num_experts_per_tok") or 1)) * mlp
        if experts > 1
        else total,
    }


def _sixteen_bit_lm(config: dict[str, Any]) -> bool:
    heads = [str(a) for a in config.get("architectures") or []]
    causal = any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in heads)
    dtype = str(config.get("dtype") or config.get("torch_dtype") or "")
    return causal and dtype.removeprefix("torch.") in ("bfloat16", "float16")


def estimate_from_config(options: Any, machine: Any) -> FitResult:
    """--analytic: config.json only, no torch."""
    if options.config is not None:
        data, file = hfconfig.read_config(options.config)
        name = (
            options.model if options.model != options.config else hfconfig.display_name(data, file)
        )
    elif options.model in presets():
        preset = presets()[options.model]
        data = {
            "model_type": preset.config_class.removesuffix("Config").lower(),
            "architectures": [preset.model_class],  # so a preset gets a config.json's defaults
            **preset.config,
        }
        name = options.model
    elif "/" in options.model:
        data, _ = hfconfig.read_config(hfconfig.cached_config(options.model))
        name = options.model
    else:
        raise InputError(
            f"--analytic needs a config: {options.model!r} is not a preset or a cached Hub id",
            fix="pass --config path/to/config.json",
        )
    counts = count_decoder(data)
    target = hardware.target(options.gpu, machine)
    require_fp8(options, target.spec)
    if options.inference:
        precision, why = hardware.resolve_weights(options.weights, target.spec)
    else:
        # the traced estimate's default: a causal LM from a 16-bit checkpoint keeps 16-bit weights
        as_traced = (
            "bf16" if not (options.lora or options.qlora) and _sixteen_bit_lm(data) else None
        )
        precision, why = hardware.resolve_precision(
            options.precision, target.spec, as_traced, sharded_full(options)
        )
    ctx = Context(options, target.spec, target.memory_bytes, target.origin, precision, why)
    n = counts["params"]
    peft = options.lora or options.qlora
    if options.inference:
        batch = options.batch_size or 1
        context = options.context or options.seq_len or 4096
        kv = kv_cache_bytes(
            counts["layers"], counts["kv_heads"], counts["head_dim"], batch, context, 2
        )
        breakdown = {"weights": int(n * weight_bytes(precision)), "kv_cache": int(kv)}
        sizes = Sizes(n, 0, 0, int(n * weight_bytes(precision)), 0, 0, 0, 0, 0)
        return _result(
            name,
            sizes,
            ctx,
            batch,
            context,
            None,
            [],
            breakdown,
            inference={
                "batch_size": batch,
                "context": context,
                "weights": precision,
                "kv_cache_bytes": int(kv),
            },
        )
    element = 2 if precision in ("bf16", "fp16") else 4
    trainable = 0 if peft else n
    # NF4: half a byte a weight + its absmax (8-bit codes double-quantised, else fp32 per 64)
    nf4 = 0.5 + (1 / 64 + 4 / (64 * 256) if options.double_quant else 4 / 64)
    frozen = int(n * (nf4 if options.qlora else 2)) if peft else 0
    sizes = Sizes(n, trainable, trainable * element, frozen, 0, 0, 0, 0, 0)
    notes = (
        ["LoRA adapters are not counted by --analytic (drop it for the traced estimate)"]
        if peft
        else []
    )
    return _result(name, sizes, ctx, options.batch_size or 1, options.seq_len, None, notes)

"""`--inference`: serving memory, tensor-parallel degree, prefill and decode tokens/s.

Memory per GPU: weights in the serving format split over the tensor-parallel group, the KV cache
for batch × context (grouped-query aware: 2 × layers × KV heads × head_dim per token, split over
the group, replicated where there are fewer KV heads than GPUs), one layer's activations for the
prefill chunk plus the last-token logits, the CUDA context, and the headroom vLLM keeps
(gpu_memory_utilization 0.9). Time is a roofline: prefill is bound by FLOPs, decode by reading
the weights and the KV cache once per step; tensor parallelism adds two all-reduces per layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dlrig.errors import InputError
from dlrig.fit import hardware, hfconfig
from dlrig.fit.build import skip_weight_init
from dlrig.fit.context import Context, calibration, fitted
from dlrig.fit.result import FitResult
from dlrig.fit.tracing import make_workload
from dlrig.knowledge import weight_formats
from dlrig.units import human_bytes

# bytes per weight: int8/int4 are weight-only (per-channel / group-128 fp16 scale and zero)
WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0 + 2 / 4096, "int4": 0.5 + 4 / 128}


def weight_bytes(weights: str) -> float:
    """Bytes per weight of a serving format: the GPU dtypes and int8/int4 above, a GGUF mix
    or an EXL2 rate (knowledge/weight_formats: their bits per weight over the whole file)."""
    if weights in WEIGHT_BYTES:
        return WEIGHT_BYTES[weights]
    bits = weight_formats.bits_per_weight(weights)
    if bits is None:
        raise InputError(
            f"--weights {weights}: not a weight format dlrig knows",
            fix="one of "
            + ", ".join(WEIGHT_BYTES)
            + ", gguf-q4_k_m (any llama.cpp mix) or exl2-4.65",
        )
    return bits / 8


def dequantises(weights: str) -> bool:
    """Weight-only formats whose GEMV kernels dequantise on the fly (a lower share of the
    memory bandwidth goes to the weights)."""
    return weights in ("int8", "int4") or weights not in WEIGHT_BYTES


TP_DEGREES = (1, 2, 4, 8)
PREFILL_CHUNK_TOKENS = 8192  # vLLM's chunked prefill budget per step (max_num_batched_tokens)
MEMORY_UTILISATION = 0.9  # vLLM gpu_memory_utilization default


def kv_cache_bytes(
    layers: int, kv_heads: int, head_dim: int, batch: int, context: int, element: float
) -> float:
    return 2.0 * layers * kv_heads * head_dim * element * batch * context


def _geometry(config: Any) -> dict[str, int]:
    text = getattr(config, "text_config", None) or config
    heads = int(text.num_attention_heads)
    hidden = int(text.hidden_size)
    return {
        "layers": int(text.num_hidden_layers),
        "heads": heads,
        "kv_heads": hfconfig.kv_heads(text, heads),
        "head_dim": int(getattr(text, "head_dim", None) or hidden // heads),
        "hidden": hidden,
        "inter": int(getattr(text, "intermediate_size", None) or 4 * hidden),
        "vocab": int(text.vocab_size),
        # the longest context the model takes (vLLM's default max_model_len); 0 when unknown
        "max_positions": int(getattr(text, "max_position_embeddings", None) or 0),
    }


def _count(workload: Any) -> int:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True), skip_weight_init():
        model = workload.build(None)
    return sum(p.numel() for p in model.parameters())


def plan_serving(
    params: int,
    geometry: dict[str, int],
    ctx: Context,
    weights: str,
    batch: int,
    context: int,
    prompt: int,
    engine: str = "graphs",
    overrides: dict[str, float] | None = None,
    tensor_parallel: int | None = None,
) -> dict[str, Any]:
    """`tensor_parallel`: the group size the user serves over (--gpus); None picks the
    smallest of TP_DEGREES that holds the weights and KV cache."""
    spec, g = ctx.spec, geometry
    table = calibration()
    cal = fitted(overrides)
    weight_total = params * weight_bytes(weights)
    kv_element = 1.0 if weights == "fp8" else 2.0
    kv_total = kv_cache_bytes(g["layers"], g["kv_heads"], g["head_dim"], batch, context, kv_element)
    chunk = min(batch * prompt, PREFILL_CHUNK_TOKENS)
    activations = chunk * (4 * g["hidden"] + 3 * g["inter"]) * 2.0 + batch * g["vocab"] * 4.0
    fixed = float(table["sizes"]["cuda_context_bytes"])
    room = ctx.memory_bytes * MEMORY_UTILISATION
    choice = None
    for tp in (tensor_parallel,) if tensor_parallel else TP_DEGREES:
        if g["heads"] % tp:
            continue
        kv_share = kv_total / min(tp, g["kv_heads"]) if g["kv_heads"] >= 1 else kv_total
        per_gpu = weight_total / tp + kv_share + activations + fixed
        choice = (tp, 1, per_gpu, kv_share)
        if per_gpu <= room:
            break
    assert choice is not None
    tp, stages, per_gpu, kv_share = choice
    if per_gpu > room:  # pipeline stages of TP-8 groups split the layers
        stages = math.ceil((weight_total / tp + kv_share) / max(1.0, room - activations - fixed))
        per_gpu = (weight_total / tp + kv_share) / stages + activations + fixed
    shards = tp * stages
    # weight-only int8/int4 formats dequantise in the GEMV kernel: a lower share of the bandwidth
    quantised = dequantises(weights)
    efficiency = cal[
        "decode_quantized_bandwidth_efficiency" if quantised else "decode_bandwidth_efficiency"
    ]
    bandwidth = (spec.memory_bandwidth_gbs or 500.0) * 1e9 * min(1.0, efficiency)
    peak = (
        spec.peak_tflops({"fp8": "fp8", "fp16": "fp16"}.get(weights, "bf16"))
        or spec.fp16_tflops
        or spec.fp32_tflops
        or 1.0
    )
    # weight-only formats dequantise inside the GEMM: at prefill and large-batch decode sizes
    # (compute-bound) the W4A16/W8A16 kernels reach less of the peak than the 16-bit GEMM does
    compute = (
        peak
        * 1e12
        * min(
            1.0,
            cal[
                "prefill_quantized_compute_efficiency"
                if quantised
                else "prefill_compute_efficiency"
            ],
        )
    )
    attention_flops = (
        2.0 * 2 * g["layers"] * g["heads"] * g["head_dim"]
    )  # QKᵀ and PV per token pair
    # prefill: every prompt token through the weights, causal attention over the prompt
    prefill_flops = 2.0 * params * batch * prompt + attention_flops * batch * prompt * prompt / 2
    prefill_s = max(prefill_flops / (compute * shards), weight_total / shards / bandwidth)
    # decode: one token per sequence per step, reading the weights and the whole KV cache
    mean_context = (prompt + context) / 2
    kv_read = kv_cache_bytes(
        g["layers"], g["kv_heads"], g["head_dim"], batch, int(mean_context), kv_element
    )
    # the weights' GEMMs and the attention over the KV cache are separate kernels, each bound
    # by its own roofline; their times add (a max over the step's totals would let the GEMMs'
    # compute hide the cache reads, which at large batches dominate)
    gemm_s = max(weight_total / shards / bandwidth, 2.0 * params * batch / shards / compute)
    attention_s = max(
        kv_read / min(shards, g["kv_heads"] * stages) / bandwidth,
        attention_flops * batch * mean_context / shards / compute,
    )
    comm = 0.0
    if tp > 1:
        # two all-reduces of the step's hidden states per layer; at decode sizes (kilobytes)
        # each costs its latency, not its bytes
        if spec.nvlink_gbs:
            link = spec.nvlink_gbs / 2 * 1e9 * min(1.0, cal["allreduce_efficiency"])
        else:
            link = 31.5e9 * min(1.0, cal["allreduce_efficiency"])  # PCIe 4.0 x16 per direction
        per_reduce = 2 * (tp - 1) / tp * batch * g["hidden"] * 2.0 / link
        comm = 2 * g["layers"] / stages * (per_reduce + cal["tp_allreduce_us"] * 1e-6)
    # the host's cost per step: CUDA-graph engines (vLLM, TensorRT-LLM, llama.cpp, MLC) launch
    # a step at once; eager PyTorch (HF generate, LitGPT) launches every kernel of every layer
    if engine == "eager":
        host = g["layers"] / stages * cal["decode_eager_layer_us"] * 1e-6
    else:
        # a CUDA graph launches the step at once, but each layer's dozen kernels still take a
        # few microseconds each however little they read: a floor per layer, plus a fixed cost
        # per step (sampling, scheduling)
        host = (
            g["layers"] / stages * cal["decode_graph_layer_us"] + cal["decode_step_overhead_us"]
        ) * 1e-6
    step = gemm_s + attention_s + comm + host
    step *= stages  # a token passes every stage in turn
    prefill_s += host * stages
    # What the KV cache could hold in the memory left over, as vLLM reports it at start-up
    # ("Maximum concurrency for N tokens per request: X"): the budget less weights,
    # activations and the context, over the cache's bytes per token on each GPU.
    kv_per_token = kv_total / max(1, batch * context) / min(shards, max(1, g["kv_heads"] * stages))
    kv_room = room - (per_gpu - kv_share / stages)
    cache_tokens = max(0, int(kv_room / kv_per_token)) if kv_per_token else 0
    generated = max(1, context - prompt)
    return {
        "kv_cache_tokens": cache_tokens,
        "max_concurrency": round(cache_tokens / context, 2),
        "max_context": min(cache_tokens, g.get("max_positions") or cache_tokens),
        "weights": weights,
        "batch_size": batch,
        "context": context,
        "prompt_tokens": prompt,
        "tensor_parallel": tp,
        "pipeline_stages": stages,
        "gpus": shards,
        "weights_bytes": int(weight_total),
        "kv_cache_bytes": int(kv_total),
        "kv_cache_bytes_per_token": int(kv_total / max(1, batch * context)),
        "activation_bytes": int(activations),
        "memory_per_gpu_bytes": int(per_gpu),
        "allocated_per_gpu_bytes": int(
            per_gpu - fixed
        ),  # what torch.cuda.max_memory_allocated sees
        "engine": engine,
        "memory_budget_bytes": int(room),
        "prefill_tokens_per_s": batch * prompt / prefill_s,
        "decode_tokens_per_s": batch / step,
        "decode_tokens_per_s_per_sequence": 1.0 / step,
        "time_per_output_token_s": step,
        "time_to_first_token_s": prefill_s,
        # what a static benchmark of this batch reports as its throughput (TensorRT-LLM's and
        # LMDeploy's tables, vLLM's benchmark_throughput): output tokens over the whole run,
        # prefill included; at large batches the prefill is a large share of the run
        "end_to_end_output_tokens_per_s": batch * generated / (prefill_s + generated * step),
    }


@dataclass(frozen=True)
class Serving:
    """What a serving estimate is computed from (fit/inference.plan_serving's arguments)."""

    name: str
    params: int
    geometry: dict[str, int]
    ctx: Context
    weights: str
    why: str
    batch: int
    context: int
    prompt: int
    engine: str
    tensor_parallel: int | None = None  # --gpus N: served tensor-parallel over N GPUs

    def plan(self, overrides: dict[str, float] | None = None) -> dict[str, Any]:
        return plan_serving(
            self.params,
            self.geometry,
            self.ctx,
            self.weights,
            self.batch,
            self.context,
            self.prompt,
            self.engine,
            overrides,
            self.tensor_parallel,
        )


def serving(options: Any, machine: Any) -> Serving:
    workload = make_workload(options)
    if workload.task != "causal_lm":
        raise InputError(
            f"--inference estimates text generation; {workload.name} is a {workload.task.replace('_', ' ')} model",
            fix="use a causal language model (Llama, Mistral, Qwen, Gemma, Phi, GPT-2, ...)",
        )
    geometry = _geometry(workload.config)
    if options.gpus > 1 and geometry["heads"] % options.gpus:
        raise InputError(
            f"--gpus {options.gpus}: tensor parallelism splits {workload.name}'s "
            f"{geometry['heads']} attention heads evenly, and {options.gpus} does not divide them",
            fix="use a --gpus that divides the head count (1, 2, 4, 8, ...), or drop --gpus",
        )
    target = hardware.target(options.gpu, machine)
    weights, why = hardware.resolve_weights(options.weights, target.spec)
    ctx = Context(options, target.spec, target.memory_bytes, target.origin, "bf16", why)
    context = options.context or workload.seq_len or 4096
    limit = geometry.get("max_positions") or 0
    if limit and context > limit:
        # vLLM refuses the same: a max_model_len above the config's max_position_embeddings
        raise InputError(
            f"--context {context}: {workload.name} takes at most {limit} positions "
            "(max_position_embeddings)",
            fix=f"use --context {limit} or less, or a config with rope scaling for longer ones",
        )
    return Serving(
        name=workload.name,
        params=_count(workload),
        geometry=geometry,
        ctx=ctx,
        weights=weights,
        why=why,
        batch=options.batch_size or 1,
        context=context,
        prompt=min(options.seq_len or context // 2, context) if options.context else context // 2,
        engine=options.engine or "graphs",
        tensor_parallel=options.gpus if options.gpus > 1 else None,
    )


def estimate(options: Any, machine: Any) -> FitResult:
    plan = serving(options, machine)
    served = plan.plan()
    geometry, target, weights, why = plan.geometry, plan.ctx, plan.weights, plan.why
    batch, context, engine, params = plan.batch, plan.context, plan.engine, plan.params
    per_gpu = served["memory_per_gpu_bytes"]
    fits = served["gpus"] <= max(1, plan.tensor_parallel or 1) and (
        per_gpu <= served["memory_budget_bytes"]
    )
    breakdown = {
        "weights": int(served["weights_bytes"] / served["gpus"]),
        "kv_cache": int(served["kv_cache_bytes"] / min(served["gpus"], geometry["kv_heads"])),
        "activations": served["activation_bytes"],
        "cuda_context": int(
            per_gpu
            - served["weights_bytes"] / served["gpus"]
            - served["kv_cache_bytes"] / min(served["gpus"], geometry["kv_heads"])
            - served["activation_bytes"]
        ),
    }
    assumptions = (
        f"GPU: {target.spec.id} ({target.gpu_origin}); weights {weights} ({why})",
        f"KV cache: 2 × {geometry['layers']} layers × {geometry['kv_heads']} KV heads × {geometry['head_dim']} × "
        f"{'1 byte (fp8 cache)' if weights == 'fp8' else '2 bytes'} per token = "
        f"{human_bytes(served['kv_cache_bytes_per_token'])}/token, for {batch} × {context} tokens",
        f"activations per step: one layer's working set for a prefill chunk of ≤ {PREFILL_CHUNK_TOKENS} tokens plus last-token logits",
        f"fits when ≤ {MEMORY_UTILISATION:.0%} of GPU memory (vLLM's gpu_memory_utilization); "
        + (
            f"tensor-parallel over the {plan.tensor_parallel} GPUs of --gpus"
            if plan.tensor_parallel
            else "tensor-parallel degree is the smallest of 1, 2, 4, 8 dividing the attention heads "
            "that fits, then pipeline stages"
        ),
        "time: roofline; prefill bound by FLOPs, a decode step the weights' GEMMs plus the "
        "attention over the KV cache (each bound by its bytes or its FLOPs, their times added), "
        "weight-only int8/int4 at their own efficiencies, efficiencies in fit_calibration.toml "
        "[fitted] (decode_*, prefill_*); "
        + (
            "eager PyTorch generate (HF, LitGPT): every layer's kernels launched from Python each step"
            if engine == "eager"
            else "a CUDA-graph serving engine (vLLM, TensorRT-LLM, llama.cpp, MLC): one launch per "
            "step, a floor per layer and a fixed cost per step fitted on published serving rows"
        ),
    )
    return FitResult(
        model=plan.name,
        method="inference",
        gpu=target.spec.id,
        gpu_memory_bytes=target.memory_bytes,
        params=params,
        trainable_params=0,
        batch_size=batch,
        seq_len=context,
        image_size=None,
        memory_peak_bytes=per_gpu,
        memory_breakdown=breakdown,
        peak_phase="decode",
        fits=fits,
        margin_bytes=int(served["memory_budget_bytes"] - per_gpu),
        step_time_s=served["time_per_output_token_s"],
        tokens_per_s=served["decode_tokens_per_s"],
        timing={"time_to_first_token_s": served["time_to_first_token_s"]},
        setup={
            "batch_size": batch,
            "context": context,
            "weights": weights,
            "engine": engine,
            "gpu": target.spec.id,
        },
        assumptions=assumptions,
        inference=served,
    )

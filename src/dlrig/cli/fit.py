"""`dlrig fit`: will this model train on this GPU, at which batch size, and how fast?"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from dlrig import fit
from dlrig.cli.common import (
    choice_option,
    console,
    json_option,
    options_from,
    print_json,
    print_report,
)
from dlrig.errors import InputError
from dlrig.fit import checkpointing
from dlrig.fit.cache import user_cache
from dlrig.fit.options import (
    ACTIVATIONS,
    ATTENTION,
    CHECKPOINTING,
    ENGINES,
    OFFLOAD,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PP_SCHEDULES,
    PRECISIONS,
    STRATEGIES,
    WEIGHT_FORMATS,
)
from dlrig.fit.presets import presets
from dlrig.fit.render import render_text
from dlrig.knowledge.gpus import catalogue
from dlrig.machine import nvidia
from dlrig.machine.model import Machine, Origin
from dlrig.machine.runner import ProbeContext
from dlrig.report import envelope

if TYPE_CHECKING:
    from dlrig.machine.model import Machine

EPILOG = (
    "Exit codes: 0 it fits (or the listing was printed); 1 it does not fit (the report says "
    "what would); 2 bad usage or an input that cannot be read (one line: the input, what is "
    "wrong, the fix); 130/143 stopped by SIGINT/SIGTERM."
)


@click.command("fit", epilog=EPILOG)
@click.argument("model", required=False)
@click.option("--batch-size", type=int, help="Per-GPU batch size (default: the preset's).")
@click.option("--seq-len", type=int, help="Sequence length for language models.")
@click.option("--image-size", type=int, help="Image side in pixels for vision models.")
@choice_option(
    "--precision",
    choices=PRECISIONS,
    default="auto",
    help="auto: what people run: bf16 weights for an LLM fine-tuned from a 16-bit checkpoint, "
    "else bf16 autocast over fp32 weights (fp16 where the GPU has no bf16). bf16/fp16: pure "
    "16-bit weights and compute (fp16: model.half(), apex amp O2's compute).",
)
@choice_option("--optimizer", choices=OPTIMIZERS, default="adamw")
@choice_option(
    "--grad-checkpointing",
    choices=CHECKPOINTING,
    is_flag=False,
    flag_value="full",
    default="none",
    help="Activation checkpointing; the bare flag means full.",
)
@click.option(
    "--checkpoint-blocks",
    default="1",
    metavar="FRACTION",
    callback=lambda _ctx, _param, value: checkpointing.parse(value),
    help="With --grad-checkpointing full: the fraction of the blocks checkpointed, evenly "
    "spaced (fms-fsdp's selective_checkpointing): 1/2, 1/3, 2/3, 1/4, 3/4; 1/n about "
    "transformers' every_n_layers=n.",
)
@click.option(
    "--grad-accum", type=int, default=1, show_default=True, help="Gradient accumulation steps."
)
@click.option("--gpus", type=int, default=1, show_default=True, help="Data-parallel GPUs.")
@choice_option(
    "--strategy",
    choices=STRATEGIES,
    default="ddp",
    help="fsdp = FULL_SHARD, hsdp = HYBRID_SHARD (within --gpus-per-node), fsdp-grad-op = SHARD_GRAD_OP.",
)
@click.option(
    "--gpu",
    help="GPU model: catalogue id or any alias, e.g. a100, h100-sxm5-80gb (default: this machine's GPU).",
)
@click.option("--config", "config_path", help="A model's config.json, or a folder holding one.")
@click.option("--lora", type=int, help="LoRA rank (adapters via peft; base frozen).")
@click.option("--qlora", type=int, help="QLoRA rank: 4-bit NF4 base (double quantisation) + LoRA.")
@click.option("--lora-alpha", type=float, help="LoRA alpha (default 2 × rank).")
@click.option(
    "--lora-dropout",
    type=float,
    default=0.0,
    help="Dropout on the adapters' input (default 0, peft's; LitGPT uses 0.05).",
)
@click.option(
    "--lora-targets",
    help="Modules to adapt: comma list or all-linear (default: peft's for the model).",
)
@click.option(
    "--modules-to-save",
    help="Modules trained in full beside LoRA (peft's modules_to_save), e.g. embed_tokens,lm_head.",
)
@click.option(
    "--no-kbit-prepare",
    is_flag=True,
    help="QLoRA without peft's prepare_model_for_kbit_training (LitGPT, torchtune): frozen 16-bit weights stay 16-bit.",
)
@click.option(
    "--no-double-quant",
    is_flag=True,
    help="QLoRA with one fp32 absmax per 64 weights (bnb_4bit_use_double_quant=False, LitGPT's bnb.nf4).",
)
@choice_option(
    "--attention",
    choices=ATTENTION,
    default="sdpa",
    help="Attention kernels: sdpa (fused flash/memory-efficient, transformers' default) or eager (S×S scores kept).",
)
@choice_option(
    "--activations",
    choices=ACTIVATIONS,
    default="model",
    help="Activation functions as the model's code writes them; fused: one kernel each (LitGPT, torchtune, hub kernels); liger: those and Liger's fused RMSNorm/LayerNorm, rotary embedding and SwiGLU/GeGLU (apply_liger_kernel_to_*, use_liger_kernel=True).",
)
@choice_option(
    "--optimizer-impl",
    choices=OPTIMIZER_IMPLS,
    default="foreach",
    help="torch.optim step: foreach (CUDA default, parameter-sized temporaries), for-loop (foreach=False) or fused=True.",
)
@click.option(
    "--keep-grads",
    is_flag=True,
    help="Gradients stay allocated between steps (optimizer.zero_grad(set_to_none=False), PyTorch < 2.0's default).",
)
@click.option(
    "--channels-last",
    is_flag=True,
    help="Convolution nets in NHWC layout (model and inputs .to(memory_format=torch.channels_last)).",
)
@choice_option(
    "--offload",
    choices=OFFLOAD,
    default="none",
    help="CPU offload (ZeRO-Offload / FSDP CPUOffload); host RAM is reported.",
)
@click.option(
    "--optimizer-in-backward",
    is_flag=True,
    help="Step each parameter as its gradient is ready and free the gradient (torchtune's optimizer_in_bwd).",
)
@click.option(
    "--activation-offload",
    is_flag=True,
    help="Offload the activations saved for backward to host memory (torchtune's enable_activation_offloading).",
)
@click.option(
    "--no-grad-sync",
    "grad_sync",
    flag_value=False,
    default=True,
    help="FSDP accumulation without gradient sync: unsharded gradients kept, one reduce-scatter per step.",
)
@click.option(
    "--fsdp-mixed-units",
    is_flag=True,
    help="FSDP1 units holding frozen and trainable weights (use_orig_params=True, wrapped by "
    "block: Lightning, accelerate): the frozen weights get gradients too.",
)
@click.option(
    "--compile",
    "compile_model",
    is_flag=True,
    help="torch.compile the whole model and loss (HF Trainer's torch_compile): fused "
    "memory-bound kernels, pointwise results recomputed in backward.",
)
@click.option(
    "--compile-blocks",
    is_flag=True,
    help="torch.compile each repeated block and the loss, the head eager (torchtitan).",
)
@click.option(
    "--loss-chunks",
    type=int,
    default=0,
    metavar="N",
    help="Chunked cross-entropy (torchtune's CEWithChunkedOutputLoss, 8 in its recipes): the "
    "output projection and the fp32 loss in N chunks of the sequence.",
)
@click.option(
    "--fp8",
    is_flag=True,
    help="Float8 linear layers (torchao float8, Transformer Engine): their matmuls at the FP8 peak.",
)
@click.option(
    "--tp",
    type=int,
    default=1,
    show_default=True,
    help="Tensor-parallel degree (with sequence parallelism, as Megatron and torchtitan run it).",
)
@click.option(
    "--pp",
    type=int,
    default=1,
    show_default=True,
    help="Pipeline stages; --grad-accum is the micro-batches each step pipelines.",
)
@click.option(
    "--cp",
    type=int,
    default=1,
    show_default=True,
    help="Context-parallel degree: each sequence split over this many GPUs.",
)
@choice_option(
    "--pp-schedule",
    choices=PP_SCHEDULES,
    default="1f1b",
    help="Pipeline schedule: 1f1b, interleaved-1f1b (two stages per GPU) or gpipe.",
)
@click.option("--inference", is_flag=True, help="Serving: weights, KV cache, GPUs, tokens/s.")
@click.option(
    "--weights",
    metavar="FORMAT",
    help="Inference weight format: "
    + ", ".join(WEIGHT_FORMATS)
    + ", a llama.cpp mix (gguf-q4_k_m, gguf-q8_0, ...) or exl2-BITS (default bf16, fp16 where the GPU has no bf16).",
)
@click.option("--context", type=int, help="Inference: tokens per sequence (prompt + output).")
@choice_option(
    "--engine",
    choices=ENGINES,
    help="Inference engine: graphs = CUDA-graph servers (vLLM, TensorRT-LLM, llama.cpp; default), "
    "eager = PyTorch generate (HF, LitGPT).",
)
@click.option(
    "--analytic",
    is_flag=True,
    help="Instant count from the config only: parameters, optimizer state, KV cache (no trace).",
)
@choice_option(
    "--interconnect",
    choices=("nvlink", "pcie"),
    help="GPU-to-GPU link (default from the GPU: SXM → NVLink, PCIe card → PCIe).",
)
@click.option("--gpus-per-node", type=int, default=8, show_default=True)
@click.option(
    "--network-gbps", type=float, help="Network per GPU between nodes, Gb/s (default 200)."
)
@click.option(
    "--dataset-size", type=int, help="Samples in the dataset (with --epochs: time to train)."
)
@click.option("--epochs", type=float, default=1.0, show_default=True)
@click.option(
    "--tokens", type=float, help="Tokens to train on (time to train for language models)."
)
@click.option(
    "--global-batch", type=int, help="Target global batch: find micro-batch × accumulation."
)
@click.option(
    "--input", "input_spec", help="Batch of a custom model: 'x:float32[B,3,224,224],y:int64[B]'."
)
@click.option("--no-max-batch", is_flag=True, help="Skip the largest-batch search (faster).")
@click.option("--list-presets", is_flag=True, help="List the model presets and exit.")
@click.option("--list-gpus", is_flag=True, help="List the GPU catalogue and exit.")
@json_option
def fit_command(**params: Any) -> None:
    """Estimate peak GPU memory, the largest batch, step time and time to train — without a GPU.

    MODEL is a preset (resnet50, vit-b16, bert-large, gpt2, t5-base, llama3-8b, ...), a Hub id
    in the local Hugging Face cache (meta-llama/Llama-3.1-8B), any model with --config PATH, or
    your own package.module:factory with --input describing the batch.
    """
    as_json: bool = params.pop("as_json")
    if params.pop("list_presets"):
        _list_presets(as_json)
        return
    if params.pop("list_gpus"):
        _list_gpus(as_json)
        return
    model: str | None = params.pop("model")
    config_path: str | None = params.pop("config_path")
    if not model and not config_path:
        raise InputError(
            "no model given", fix="dlrig fit MODEL or --config PATH (see dlrig fit --list-presets)"
        )
    compile_model, compile_blocks = params.pop("compile_model"), params.pop("compile_blocks")
    if compile_model and compile_blocks:
        raise InputError(
            "--compile and --compile-blocks both given",
            fix="keep --compile (the whole model) or --compile-blocks (its blocks and loss)",
        )
    options = options_from(
        fit.Options,
        params,
        model=model or str(config_path),
        compile="blocks" if compile_blocks else "model" if compile_model else "none",
        config=config_path,
        search_max_batch=not params.pop("no_max_batch"),
        kbit_prepare=not params.pop("no_kbit_prepare"),
        double_quant=not params.pop("no_double_quant"),
    )
    gpu, analytic = options.gpu, options.analytic
    machine = _this_machine() if gpu is None else None
    err = console(stderr=True)
    with user_cache():
        if as_json or not err.is_terminal or analytic:
            result = fit.run(options, machine=machine)
        else:
            with err.status(f"tracing a training step of {model} on fake tensors…"):
                result = fit.run(options, machine=machine)
    print_report(result, as_json, render_text)
    if not result.fits:
        sys.exit(1)


def _this_machine() -> Machine | None:
    """This machine's GPUs through NVML (no CUDA initialisation), or None."""
    try:
        _driver, gpus, _topology, _issues = nvidia.probe(ProbeContext(timeout_s=5))
    except Exception:  # noqa: BLE001 - no GPU information is fine: --gpu is then required
        return None
    return Machine(origin=Origin(kind="live"), gpus=gpus)


def _list_presets(as_json: bool) -> None:
    table = presets()
    if as_json:
        print_json(
            envelope(
                "dlrig.fit.presets",
                1,
                {
                    "presets": [
                        {
                            "name": p.name,
                            "task": p.task,
                            "model_class": p.model_class,
                            "batch_size": p.batch_size,
                            "seq_len": p.seq_len,
                            "image_size": p.image_size,
                            "source": p.source,
                        }
                        for p in table.values()
                    ],
                },
            )
        )
        return
    out = console()
    for preset in table.values():
        size = f"seq {preset.seq_len}" if preset.seq_len else f"{preset.image_size}px"
        out.print(f"{preset.name:12} {preset.model_class:30} batch {preset.batch_size:4} {size}")


def _list_gpus(as_json: bool) -> None:
    specs = catalogue().specs
    if as_json:
        print_json(
            envelope(
                "dlrig.fit.gpus",
                1,
                {
                    "gpus": [
                        {
                            "id": s.id,
                            "name": s.name,
                            "memory_gb": s.memory_gb,
                            "bf16_tflops": s.bf16_tflops,
                            "fp16_tflops": s.fp16_tflops,
                            "fp32_tflops": s.fp32_tflops,
                            "memory_bandwidth_gbs": s.memory_bandwidth_gbs,
                            "form_factor": s.form_factor,
                        }
                        for s in specs
                    ],
                },
            )
        )
        return
    out = console()
    for spec in specs:
        # the 16-bit tensor rate the card has: bf16, else fp16 (Volta, Turing), else fp32 only
        dtype, rate = next(
            ((d, r) for d, r in (("bf16", spec.bf16_tflops), ("fp16", spec.fp16_tflops)) if r),
            ("fp32", spec.fp32_tflops),
        )
        out.print(
            f"{spec.id:22} {_cut(spec.name, 44):44} {spec.memory_gb or 0:5.0f} GB  {dtype} "
            f"{rate or 0:7.1f} TFLOPS",
            highlight=False,
        )


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"

"""`dlrig fit`: will this model train on this GPU, at which batch size, and how fast?"""

from __future__ import annotations

import sys

import click

from dlrig.cli.common import console, json_option, print_json
from dlrig.errors import InputError


@click.command("fit")
@click.argument("model", required=False)
@click.option("--batch-size", type=int, help="Per-GPU batch size (default: the preset's).")
@click.option("--seq-len", type=int, help="Sequence length for language models.")
@click.option("--image-size", type=int, help="Image side in pixels for vision models.")
@click.option(
    "--precision",
    default="amp-bf16",
    show_default=True,
    type=click.Choice(["fp32", "tf32", "amp-fp16", "amp-bf16", "bf16"]),
)
@click.option(
    "--optimizer",
    default="adamw",
    show_default=True,
    type=click.Choice(["sgd", "sgd-momentum", "adam", "adamw", "adafactor", "adamw-8bit"]),
)
@click.option(
    "--grad-checkpointing",
    type=click.Choice(["none", "full", "selective"]),
    is_flag=False,
    flag_value="full",
    default="none",
    show_default=True,
    help="Activation checkpointing; the bare flag means full.",
)
@click.option(
    "--grad-accum", type=int, default=1, show_default=True, help="Gradient accumulation steps."
)
@click.option("--gpus", type=int, default=1, show_default=True, help="Data-parallel GPUs.")
@click.option(
    "--strategy",
    default="ddp",
    show_default=True,
    type=click.Choice(["ddp", "zero1", "zero2", "fsdp"]),
)
@click.option("--gpu", help="Target GPU: catalogue id or alias (default: this machine's GPU).")
@click.option(
    "--interconnect",
    type=click.Choice(["nvlink", "pcie"]),
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
def fit_command(
    model: str | None,
    batch_size: int | None,
    seq_len: int | None,
    image_size: int | None,
    precision: str,
    optimizer: str,
    grad_checkpointing: str,
    grad_accum: int,
    gpus: int,
    strategy: str,
    gpu: str | None,
    interconnect: str | None,
    gpus_per_node: int,
    network_gbps: float | None,
    dataset_size: int | None,
    epochs: float,
    tokens: float | None,
    global_batch: int | None,
    input_spec: str | None,
    no_max_batch: bool,
    list_presets: bool,
    list_gpus: bool,
    as_json: bool,
) -> None:
    """Estimate peak GPU memory, the largest batch, step time and time to train — without a GPU.

    MODEL is a preset (resnet50, vit-b16, bert-large, gpt2, t5-base, llama3-8b, ...) or your own
    package.module:factory with --input describing the batch.
    """
    if list_presets:
        _list_presets(as_json)
        return
    if list_gpus:
        _list_gpus(as_json)
        return
    if not model:
        raise InputError("no model given", fix="dlrig fit MODEL  (see dlrig fit --list-presets)")
    from dlrig import fit

    options = fit.Options(
        model=model,
        batch_size=batch_size,
        seq_len=seq_len,
        image_size=image_size,
        precision=precision,
        optimizer=optimizer,
        grad_checkpointing=grad_checkpointing,
        grad_accum=grad_accum,
        gpus=gpus,
        strategy=strategy,
        gpu=gpu,
        interconnect=interconnect,
        gpus_per_node=gpus_per_node,
        network_gbps=network_gbps,
        dataset_size=dataset_size,
        epochs=epochs,
        tokens=tokens,
        global_batch=global_batch,
        input_spec=input_spec,
        search_max_batch=not no_max_batch,
    )
    machine = _this_machine() if gpu is None else None
    err = console(stderr=True)
    if as_json or not err.is_terminal:
        result = fit.estimate(options, machine=machine)
    else:
        with err.status(f"tracing a training step of {model} on fake tensors…"):
            result = fit.estimate(options, machine=machine)
    if as_json:
        print_json(result.to_dict())
    else:
        from dlrig.fit.render import render_text

        render_text(result, console())
    if not result.fits:
        sys.exit(1)


def _this_machine() -> object:
    """This machine's GPUs through NVML (no CUDA initialisation), or None."""
    from dlrig.machine import nvidia
    from dlrig.machine.model import Machine, Origin
    from dlrig.machine.runner import ProbeContext

    try:
        _driver, gpus, _topology, _issues = nvidia.probe(ProbeContext(timeout_s=5))
    except Exception:  # noqa: BLE001 - no GPU information is fine: --gpu is then required
        return None
    return Machine(origin=Origin(kind="live"), gpus=gpus)


def _list_presets(as_json: bool) -> None:
    from dlrig.fit.presets import presets

    table = presets()
    if as_json:
        print_json(
            {
                "schema_version": 1,
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
            }
        )
        return
    out = console()
    for preset in table.values():
        size = f"seq {preset.seq_len}" if preset.seq_len else f"{preset.image_size}px"
        out.print(f"{preset.name:12} {preset.model_class:30} batch {preset.batch_size:4} {size}")


def _list_gpus(as_json: bool) -> None:
    from dlrig.knowledge.gpus import catalogue

    specs = catalogue().specs
    if as_json:
        print_json(
            {
                "schema_version": 1,
                "gpus": [
                    {
                        "id": s.id,
                        "name": s.name,
                        "memory_gb": s.memory_gb,
                        "bf16_tflops": s.bf16_tflops,
                        "memory_bandwidth_gbs": s.memory_bandwidth_gbs,
                        "form_factor": s.form_factor,
                    }
                    for s in specs
                ],
            }
        )
        return
    out = console()
    for spec in specs:
        out.print(
            f"{spec.id:20} {spec.name:40} {spec.memory_gb or 0:6.0f} GB  bf16 {spec.bf16_tflops or 0:7.1f} TFLOPS"
        )

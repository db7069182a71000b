"""Options that are each valid alone but contradict each other: LoRA settings without LoRA,
accumulation that nothing accumulates, a strategy a flag does not apply to, inference with
training flags, a model-parallel mesh that does not tile the GPUs. One line naming the flags,
what is wrong and the fix (exit 2); `options.check` calls it after each value's own check."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dlrig.errors import InputError
from dlrig.fit import checkpointing
from dlrig.fit.parallel import check_mesh, mesh_of

if TYPE_CHECKING:
    from dlrig.fit.options import Options


def flag_of(name: str) -> str:
    """An Options field as its command-line flag."""
    return "--" + name.replace("_", "-")


def check_combinations(options: Options) -> None:
    """Options each valid alone that contradict each other (or the model-parallel mesh)."""
    if options.lora is not None and options.qlora is not None:
        raise InputError(
            "--lora and --qlora both given: QLoRA already is LoRA on a 4-bit base",
            fix="keep one: --lora RANK (16-bit base) or --qlora RANK (4-bit NF4 base)",
        )
    if options.checkpoint_blocks != 1.0:
        checkpointing.fraction_of(options.checkpoint_blocks)
        if options.grad_checkpointing != "full" and not options.inference:
            raise InputError(
                f"--checkpoint-blocks {options.checkpoint_blocks:g} chooses which blocks full "
                f"checkpointing replays; checkpointing is {options.grad_checkpointing}",
                fix="add --grad-checkpointing full, or drop --checkpoint-blocks",
            )
    peft = options.lora or options.qlora
    if options.optimizer_impl != "foreach" and options.optimizer in (
        "adamw-8bit",
        "adafactor",
        "paged-adamw",
        "paged-adamw-8bit",
    ):
        raise InputError(
            f"--optimizer-impl {options.optimizer_impl} applies to torch's sgd/adam/adamw, "
            f"not to {options.optimizer} (its own kernels)",
            fix="drop --optimizer-impl, or pick --optimizer adamw",
        )
    for flag, off in (
        ("--no-kbit-prepare", not options.kbit_prepare),
        ("--no-double-quant", not options.double_quant),
    ):
        if off and not options.qlora:
            raise InputError(
                f"{flag} applies only to --qlora", fix=f"add --qlora RANK, or drop {flag}"
            )
    if not (math.isfinite(options.lora_dropout) and 0.0 <= options.lora_dropout < 1.0):
        raise InputError(
            f"--lora-dropout {options.lora_dropout!r} is not a probability below 1",
            fix="pass --lora-dropout from 0 up to, not including, 1 (e.g. 0.05)",
        )
    if not peft and (
        options.lora_alpha is not None
        or options.lora_targets is not None
        or options.lora_dropout
        or options.modules_to_save
    ):
        raise InputError(
            "--lora-alpha/--lora-dropout/--lora-targets/--modules-to-save apply only to LoRA",
            fix="add --lora RANK or --qlora RANK, or drop them",
        )
    if options.optimizer_in_backward and options.grad_accum > 1:
        raise InputError(
            "--optimizer-in-backward frees each gradient as its parameter steps, so there is "
            "nothing to accumulate",
            fix="drop --grad-accum (torchtune refuses the pair too) or --optimizer-in-backward",
        )
    if not options.grad_sync and options.strategy not in ("fsdp", "hsdp"):
        raise InputError(
            f"--no-grad-sync applies to FSDP accumulation, not --strategy {options.strategy}",
            fix="add --strategy fsdp (or hsdp), or drop --no-grad-sync",
        )
    if not options.grad_sync and (options.grad_accum < 2 or options.gpus < 2):
        raise InputError(
            "--no-grad-sync skips the gradient sync of all but the last micro-batch: it needs "
            "--grad-accum 2 or more over --gpus 2 or more",
            fix="add --grad-accum and --gpus, or drop --no-grad-sync",
        )
    if options.fsdp_mixed_units and options.analytic:
        raise InputError(
            "--fsdp-mixed-units is modelled on a traced step, not by --analytic",
            fix="drop --analytic, or drop --fsdp-mixed-units",
        )
    if options.fsdp_mixed_units and (
        options.strategy not in ("fsdp", "hsdp", "fsdp-grad-op") or options.gpus < 2
    ):
        raise InputError(
            "--fsdp-mixed-units describes FSDP units over --gpus 2 or more, not "
            f"--strategy {options.strategy} on {options.gpus} GPU(s)",
            fix="add --strategy fsdp and --gpus, or drop --fsdp-mixed-units",
        )
    if options.fp8 and (options.lora or options.qlora):
        raise InputError(
            "--fp8 converts the trained linear layers to Float8 (torchao, Transformer Engine); "
            "a LoRA or QLoRA base is frozen in 16 or 4 bits",
            fix="drop --fp8, or drop --lora/--qlora",
        )
    if options.fp8 and options.precision in ("fp32", "tf32", "amp-fp16", "fp16"):
        raise InputError(
            f"--fp8 trains the other layers in bf16, not --precision {options.precision}",
            fix="use --precision amp-bf16 (or bf16), or drop --fp8",
        )
    if options.inference:
        training_only = {
            "optimizer": "adamw",
            "grad_checkpointing": "none",
            "checkpoint_blocks": 1.0,
            "grad_accum": 1,
            "strategy": "ddp",
            "global_batch": None,
            "dataset_size": None,
            "tokens": None,
            "lora": None,
            "qlora": None,
            "offload": "none",
            "fp8": False,
            "loss_chunks": 0,
            "compile": "none",
            "tp": 1,
            "pp": 1,
            "cp": 1,
        }
        for name, default in training_only.items():
            if getattr(options, name) != default:
                raise InputError(
                    f"{flag_of(name)} applies to training, not to --inference",
                    fix=f"drop {flag_of(name)}, or drop --inference",
                )
    else:
        for name in ("weights", "context", "engine"):
            if getattr(options, name) is not None:
                raise InputError(
                    f"{flag_of(name)} applies only to --inference",
                    fix=f"add --inference, or drop {flag_of(name)}",
                )
    replicas = mesh_of(options).dp
    if options.global_batch is not None and options.global_batch < replicas:
        raise InputError(
            f"--global-batch {options.global_batch} is smaller than the {replicas} data-parallel replicas: every replica needs at least one sample",
            fix=f"use --global-batch {replicas} or more, or fewer --gpus",
        )
    if options.offload != "none" and options.strategy not in ("zero2", "zero3", "fsdp", "hsdp"):
        raise InputError(
            f"--offload {options.offload} needs a sharded strategy (ZeRO-Offload / FSDP CPUOffload)",
            fix="add --strategy zero3 or --strategy fsdp",
        )
    if options.offload == "params" and options.strategy not in ("zero3", "fsdp", "hsdp"):
        raise InputError(
            "--offload params needs parameters sharded: ZeRO-3 or FSDP",
            fix="use --strategy zero3 or --strategy fsdp, or --offload optimizer",
        )
    check_mesh(options)

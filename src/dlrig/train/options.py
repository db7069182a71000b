"""What a run is asked to do, checked once: a wrong value fails before any training starts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from dlrig.errors import InputError
from dlrig.train.backoff import OomInjector
from dlrig.train.checkpoint import FORMATS, CheckpointFormat
from dlrig.train.precision import PRECISIONS, PrecisionName


@dataclass(frozen=True)
class Options:
    precision: PrecisionName = "fp32"
    global_batch: int | None = None  # default: the loader's batch × ranks (then kept)
    micro_batch: int | None = None  # default: per-rank batch / accumulation
    accumulation: int | None = None
    max_steps: int | None = None
    oom_backoff: bool | str = "auto"  # auto: on where CUDA runs (a CPU OOM cannot be caught)
    clip_grad_norm: float | None = None
    checkpoint_dir: Path | str | None = None
    checkpoint_every_steps: int | None = None
    keep_checkpoints: int = 3
    resume: bool = True
    checkpoint_format: CheckpointFormat = "auto"
    save_on_sigterm: bool = False
    log_dir: Path | str | None = None  # TensorBoard
    log_every_steps: int = 50
    progress: bool | str = "auto"  # auto: on a terminal
    activation_checkpointing: bool | Sequence[type] = False
    compile: bool | str = False  # True, or a torch.compile backend name
    timeout_s: float = 600.0
    fp16_overflow_streak: int = 20
    # Time DDP's gradient all-reduce with a Python comm hook (gloo only). Off by default: the
    # hook costs more per step than the rest of dlrig.train (benchmarks/train_overhead.py).
    measure_comm: bool = False
    gpu_monitor: Any = "auto"  # auto | False | a dlrig.monitor GPU source (a replay in tests)
    quiet: bool = False
    inject_oom: OomInjector | None = None
    # Profile this many steps (dlrig.profile) from the second one on and report where their
    # time went; the traces go to profile_dir (default: log_dir/profile, else a temporary
    # folder). `dlrig train --profile-steps N` sets it through DLRIG_TRAIN_PROFILE_STEPS.
    profile_steps: int | None = None
    profile_dir: Path | str | None = None

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise InputError(
                f"precision={self.precision!r} is not one of {', '.join(PRECISIONS)}",
                fix="use 'bf16' (Ampere or newer), 'fp16' (older GPUs) or 'fp32'",
            )
        for name in (
            "global_batch",
            "micro_batch",
            "accumulation",
            "max_steps",
            "checkpoint_every_steps",
            "profile_steps",
        ):
            value = getattr(self, name)
            # bool is an int to Python: global_batch=True must not mean a batch of 1.
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise InputError(f"{name}={value!r}", fix=f"give {name} as a positive integer")
        if self.clip_grad_norm is not None and (
            isinstance(self.clip_grad_norm, bool)
            or not isinstance(self.clip_grad_norm, int | float)
            or not 0 < self.clip_grad_norm < float("inf")
        ):
            # torch clips with max_norm / norm: a negative max_norm flips every gradient.
            raise InputError(
                f"clip_grad_norm={self.clip_grad_norm!r} is not a positive number",
                fix="give the largest gradient norm to allow, e.g. clip_grad_norm=1.0, or None",
            )
        if isinstance(self.keep_checkpoints, bool) or not (
            isinstance(self.keep_checkpoints, int) and self.keep_checkpoints >= 1
        ):
            raise InputError(
                f"keep_checkpoints={self.keep_checkpoints!r}", fix="keep at least 1 checkpoint"
            )
        if self.micro_batch is not None and self.accumulation is not None:
            raise InputError(
                "micro_batch and accumulation given together",
                fix="give one: the other follows from the global batch",
            )
        if self.log_every_steps < 1:
            raise InputError(f"log_every_steps={self.log_every_steps}", fix="give 1 or more")
        if self.checkpoint_format not in FORMATS:
            raise InputError(
                f"checkpoint_format={self.checkpoint_format!r}",
                fix=f"use one of {', '.join(FORMATS)}",
            )
        if self.oom_backoff not in (True, False, "auto"):
            raise InputError(f"oom_backoff={self.oom_backoff!r}", fix="use True, False or 'auto'")
        if self.checkpoint_every_steps is not None and self.checkpoint_dir is None:
            raise InputError(
                "checkpoint_every_steps without checkpoint_dir",
                fix="give checkpoint_dir='checkpoints' (where to write them)",
            )
        if self.save_on_sigterm and self.checkpoint_dir is None:
            raise InputError(
                "save_on_sigterm=True without checkpoint_dir",
                fix="give checkpoint_dir='checkpoints' (where to write the checkpoint)",
            )
        if self.timeout_s <= 0:
            raise InputError(f"timeout_s={self.timeout_s}", fix="give a positive number of seconds")
        if self.fp16_overflow_streak < 1:
            raise InputError(f"fp16_overflow_streak={self.fp16_overflow_streak}", fix="give 1+")


class OptionFields(TypedDict, total=False):
    """`Options`' fields as keyword arguments of `train.Run(...)`, typed (a test keeps the two
    equal)."""

    precision: PrecisionName
    global_batch: int | None
    micro_batch: int | None
    accumulation: int | None
    max_steps: int | None
    oom_backoff: bool | str
    clip_grad_norm: float | None
    checkpoint_dir: Path | str | None
    checkpoint_every_steps: int | None
    keep_checkpoints: int
    resume: bool
    checkpoint_format: CheckpointFormat
    save_on_sigterm: bool
    log_dir: Path | str | None
    log_every_steps: int
    progress: bool | str
    activation_checkpointing: bool | Sequence[type]
    compile: bool | str
    timeout_s: float
    fp16_overflow_streak: int
    measure_comm: bool
    gpu_monitor: Any
    quiet: bool
    inject_oom: OomInjector | None
    profile_steps: int | None
    profile_dir: Path | str | None

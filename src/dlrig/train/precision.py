"""Mixed precision with the current `torch.amp` API, and a run that stops when fp16 collapses.

`torch.cuda.amp.autocast` / `torch.cuda.amp.GradScaler` are deprecated (FutureWarning since
torch 2.4); `torch.autocast(device_type, dtype)` and `torch.amp.GradScaler(device_type)` are the
spellings that work on CUDA and on the CPU alike. bf16 has fp32's exponent range, so it needs no
loss scaling; fp16 does. When fp16 gradients overflow at every step, GradScaler skips the step
and halves the scale, forever: the run "trains" without taking a step and the loss turns NaN.
`OverflowWatch` counts the skipped steps and stops the run with `diagnose`'s finding instead.
"""

from __future__ import annotations

import contextlib
import typing
from dataclasses import dataclass
from typing import Any, Literal

import torch

from dlrig import causes
from dlrig.errors import DlrigError, InputError
from dlrig.train.log import RunLog

PrecisionName = Literal["auto", "fp32", "bf16", "fp16"]
PRECISIONS: tuple[PrecisionName, ...] = typing.get_args(PrecisionName)


class TrainError(DlrigError):
    """The run cannot go on; `cause` is the shared cause id (`dlrig.causes`) when there is one."""

    def __init__(self, message: str, fix: str | None = None, cause: str | None = None) -> None:
        super().__init__(message, fix)
        self.cause = cause

    def __str__(self) -> str:
        return self.one_line()


@dataclass(frozen=True)
class Precision:
    name: str  # fp32 | bf16 | fp16
    device_type: str  # torch.device.type: cuda, cpu (mps, xpu, ... run as cpu does)

    @property
    def dtype(self) -> torch.dtype | None:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(self.name)

    @property
    def scaled(self) -> bool:
        return self.name == "fp16"

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """A fresh autocast context (or a no-op for fp32)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    def scaler(self) -> torch.amp.GradScaler | None:
        return torch.amp.GradScaler(self.device_type) if self.scaled else None


def choose(requested: str, device: torch.device, log: RunLog) -> Precision:
    """The precision to use: what was asked, or for "auto" the best the device does well."""
    device_type = device.type
    if requested not in PRECISIONS:
        raise InputError(
            f"precision={requested!r} is not one of {', '.join(PRECISIONS)}",
            fix="use 'bf16' (Ampere or newer), 'fp16' (older GPUs) or 'fp32'",
        )
    if requested != "auto":
        chosen = Precision(requested, device_type)
        if requested == "bf16" and device_type == "cuda" and not torch.cuda.is_bf16_supported():
            raise TrainError(
                f"precision='bf16' on {torch.cuda.get_device_name(device)}, which has no bf16",
                fix="use precision='fp16' (with loss scaling) on GPUs older than Ampere",
            )
        log.decide("precision", _describe(chosen))
        return chosen
    if device_type == "cuda":
        name = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        chosen = Precision(name, device_type)
        log.decide(
            "precision",
            f"precision auto -> {name} ({torch.cuda.get_device_name(device)}"
            + (" has bf16" if name == "bf16" else " has no bf16: fp16 with loss scaling")
            + ")",
        )
        return chosen
    chosen = Precision("fp32", device_type)
    log.decide("precision", "precision auto -> fp32 (CPU: bf16 autocast is slower on most CPUs)")
    return chosen


def _describe(precision: Precision) -> str:
    if precision.name == "fp16":
        return (
            f"precision fp16: torch.autocast('{precision.device_type}', torch.float16) with "
            f"torch.amp.GradScaler('{precision.device_type}')"
        )
    if precision.name == "bf16":
        return (
            f"precision bf16: torch.autocast('{precision.device_type}', torch.bfloat16), "
            "no loss scaling (bf16 has fp32's range)"
        )
    return "precision fp32"


def enable_tf32(device: torch.device, log: RunLog) -> bool:
    """TF32 tensor cores for fp32 matmuls and convolutions where the GPU has them (sm_80+)."""
    if device.type != "cuda":
        log.decide("tf32", "TF32: not used (no CUDA device)")
        return False
    major, minor = torch.cuda.get_device_capability(device)
    if major < 8:
        log.decide("tf32", f"TF32: off (sm_{major}{minor} has no TF32 tensor cores)")
        return False
    torch.set_float32_matmul_precision("high")
    torch.backends.cudnn.allow_tf32 = True
    log.decide(
        "tf32",
        f"TF32 on for fp32 matmuls and convolutions (sm_{major}{minor} has TF32 tensor cores; "
        "torch.set_float32_matmul_precision('high'))",
    )
    return True


class OverflowWatch:
    """Counts optimizer steps GradScaler skipped in a row; too many means fp16 has collapsed."""

    def __init__(self, scaler: torch.amp.GradScaler, streak_limit: int) -> None:
        self.scaler = scaler
        self.streak_limit = streak_limit
        self.streak = 0
        self.skipped_total = 0
        self._scale = scaler.get_scale()
        self.last_taken_step = 0

    def after_update(self, step: int) -> bool:
        """Call after `scaler.update()`; True when this step was skipped.

        GradScaler.step already synchronised on its found-inf flag, so reading the scale here
        costs only the update kernel.
        """
        scale = self.scaler.get_scale()
        skipped = scale < self._scale
        self._scale = scale
        if not skipped:
            self.streak = 0
            self.last_taken_step = step
            return False
        self.streak += 1
        self.skipped_total += 1
        if self.streak >= self.streak_limit:
            raise overflow_error(self.streak, scale, self.last_taken_step, step)
        return True


def overflow_error(streak: int, scale: float, last_taken: int, step: int) -> TrainError:
    """The stop, worded as `dlrig diagnose` recognises it in a log, with the shared fix."""
    cause = causes.get("fp16_overflow_nan")
    return TrainError(
        f"{cause.title} at step {step}: {streak} optimizer steps in a row skipped, reducing "
        f"loss scale to {scale:.2e}; no step taken since step {last_taken}, stopping instead of "
        "training on NaN",
        fix="precision='bf16' on Ampere or newer GPUs (no loss scaling needed); otherwise "
        + cause.default_fix[0].lower()
        + cause.default_fix[1:],
        cause=cause.id,
    )

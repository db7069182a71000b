"""Stage 5: the answer, and the `dlrig fit --json` document it turns into."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from dlrig.plain import from_plain
from dlrig.report import envelope

SCHEMA = "dlrig.fit"
# 2: envelope (schema first); memory breakdown gained autocast_weight_copies and
#    gathered_parameters; scaling_efficiency is now the step without communication over the
#    step with it; precision "auto"; advice, inference and host memory added.
SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Advice:
    """One change that would make a run fit (or fit better), with its figure."""

    change: str  # the flags, e.g. "--strategy fsdp"
    options: dict[str, Any]
    memory_peak_bytes: int
    fits: bool
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "change": self.change,
            "options": self.options,
            "memory_peak_bytes": self.memory_peak_bytes,
            "fits": self.fits,
            "note": self.note,
        }


# Keyword-only, so that what a method cannot tell (the analytic count has no step time, a
# served model no max batch) is left at its default instead of spelled out as None.
@dataclass(frozen=True, kw_only=True)
class FitResult:
    model: str
    method: Literal["trace", "analytic", "inference"]
    gpu: str
    gpu_memory_bytes: int
    params: int
    trainable_params: int
    batch_size: int
    seq_len: int | None
    image_size: int | None
    memory_peak_bytes: int
    memory_breakdown: dict[str, int]
    fits: bool
    margin_bytes: int
    setup: dict[str, Any]
    assumptions: tuple[str, ...]
    memory_reserved_bytes: int | None = None
    peak_phase: str | None = None
    max_batch_size: int | None = None
    global_batch: dict[str, Any] | None = None
    flops_per_step: float | None = None
    step_time_s: float | None = None
    samples_per_s: float | None = None
    tokens_per_s: float | None = None
    time_to_train_s: float | None = None
    mfu: float | None = None
    scaling_efficiency: float | None = None
    timing: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    activation_peak_bytes: int | None = None
    host_memory_bytes_per_node: int | None = None
    pageable_bytes: int = 0  # paged optimizer state: in the peak, free to page to the host
    advice: tuple[Advice, ...] = ()
    inference: dict[str, Any] | None = None

    @property
    def precision(self) -> str | None:
        """The precision the estimate used ("auto" resolved: `setup.precision` of the
        document); None for an inference estimate, whose weights have a format instead."""
        value = self.setup.get("precision")
        return value if isinstance(value, str) else None

    def to_dict(self) -> dict[str, Any]:
        return envelope(
            SCHEMA,
            SCHEMA_VERSION,
            {
                "model": self.model,
                "method": self.method,
                "gpu": self.gpu,
                "gpu_memory_bytes": self.gpu_memory_bytes,
                "params": self.params,
                "trainable_params": self.trainable_params,
                "batch_size": self.batch_size,
                "seq_len": self.seq_len,
                "image_size": self.image_size,
                "memory": {
                    "peak_bytes": self.memory_peak_bytes,
                    "reserved_bytes": self.memory_reserved_bytes,
                    "breakdown": self.memory_breakdown,
                    "peak_phase": self.peak_phase,
                    "activation_peak_bytes": self.activation_peak_bytes,
                    "host_bytes_per_node": self.host_memory_bytes_per_node,
                    "pageable_bytes": self.pageable_bytes,
                },
                "fits": self.fits,
                "margin_bytes": self.margin_bytes,
                "max_batch_size": self.max_batch_size,
                "global_batch": self.global_batch,
                "flops_per_step": self.flops_per_step,
                "step_time_s": self.step_time_s,
                "samples_per_s": self.samples_per_s,
                "tokens_per_s": self.tokens_per_s,
                "time_to_train_s": self.time_to_train_s,
                "mfu": self.mfu,
                "scaling_efficiency": self.scaling_efficiency,
                "timing": self.timing,
                "setup": self.setup,
                "advice": [a.to_dict() for a in self.advice],
                "inference": self.inference,
                "assumptions": list(self.assumptions),
                "notes": list(self.notes),
            },
        )

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> FitResult:
        """A saved `dlrig fit --json` document (keys a newer dlrig adds are dropped);
        ValueError names the first field that does not fit."""
        body = {k: v for k, v in document.items() if k not in ("schema", "schema_version")}
        memory = body.pop("memory", None)
        if not isinstance(memory, dict):
            raise ValueError("fit.memory: expected an object")
        for field_name, key in _MEMORY_KEYS:
            if key in memory:
                body[field_name] = memory[key]
        try:
            result: FitResult = from_plain(cls, body, "fit", strict=False)
        except ValueError as exc:  # name the field as the document spells it
            message = str(exc)
            for field_name, key in _MEMORY_KEYS:
                message = message.replace(f"fit.{field_name}:", f"fit.memory.{key}:")
            raise ValueError(message) from None
        return result


# FitResult's fields that the document nests under "memory", and their keys there.
_MEMORY_KEYS = (
    ("memory_peak_bytes", "peak_bytes"),
    ("memory_reserved_bytes", "reserved_bytes"),
    ("memory_breakdown", "breakdown"),
    ("peak_phase", "peak_phase"),
    ("activation_peak_bytes", "activation_peak_bytes"),
    ("host_memory_bytes_per_node", "host_bytes_per_node"),
    ("pageable_bytes", "pageable_bytes"),
)

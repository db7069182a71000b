"""The one place plan talks to `dlrig.fit`: trace each workload once, evaluate it on many GPUs.

`fit.trace` runs the real training step on fake tensors (seconds); `fit.evaluate` turns a trace
into memory and time for one GPU model and count (milliseconds). A plan over the whole
catalogue therefore costs one trace per workload and precision, plus one per smaller
micro-batch it has to fall back to on small GPUs (all cached), not one per GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import multiprocessing
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlrig import fit
from dlrig.errors import DlrigError, InputError
from dlrig.knowledge.gpus import GpuSpec, catalogue
from dlrig.plan.workloads import Workload


@dataclass(frozen=True)
class Evaluation:
    workload: str
    gpu: str
    gpus: int
    fits: bool
    precision: str
    strategy: str
    micro_batch: int | None
    grad_accum: int
    memory_peak_bytes: int | None
    gpu_memory_bytes: int | None
    step_time_s: float | None
    samples_per_s: float | None
    time_per_run_s: float | None
    method: str
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _fit() -> Any:
    if not hasattr(fit, "trace") or not hasattr(fit, "evaluate"):
        raise DlrigError(
            "this dlrig.fit has no trace/evaluate API (see /work/coord/fit-api.md)",
            fix="update dlrig: plan needs fit.trace and fit.evaluate",
        )
    return fit


def precision_for(workload: Workload, spec: GpuSpec) -> tuple[str, str | None]:
    """The precision to ask fit for on this GPU, and why it cannot run there (None when it
    can). "auto" stays "auto": fit resolves it per setup (a 16-bit LLM checkpoint in bf16 on one
    GPU or with DDP, fp32 masters when sharded, fp16 autocast where the GPU has no bf16), so a
    plan and `dlrig fit` give one answer."""
    if workload.precision == "auto":
        if spec.bf16_tflops or spec.fp16_tflops:
            return "auto", None
        return "fp32", (
            f"{spec.name} has no FP16/BF16 tensor cores, so mixed precision gains nothing there; "
            "give precision=fp32 to plan for it"
        )
    needs = {"bf16": "bf16_tflops", "amp-bf16": "bf16_tflops", "amp-fp16": "fp16_tflops"}.get(
        workload.precision
    )
    if needs and getattr(spec, needs) is None:
        what = "BF16" if "bf16" in workload.precision else "FP16 tensor cores"
        return (
            workload.precision,
            f"{spec.name} ({spec.architecture}) has no {what} for {workload.precision}",
        )
    return workload.precision, None


def _as_traced(precision: str) -> str:
    """amp-fp16 and amp-bf16 trace the same step (2-byte autocast tensors, fp32 master weights;
    fit ignores GradScaler), so one amp-bf16 trace serves both: fit.evaluate is asked for
    amp-fp16 on it and times the GPU's FP16 tensor rate. tests/unit/test_plan_fit.py holds the
    two equal against a real amp-fp16 trace."""
    return "amp-bf16" if precision == "amp-fp16" else precision


def _fit_options(workload: Workload, precision: str, batch: int | None, **more: Any) -> Any:
    """`fit.Options` for the workload's model and shape; `more` adds the hardware and the run."""
    return _fit().Options(
        model=workload.model,
        batch_size=batch,
        seq_len=workload.seq_len,
        image_size=workload.image_size,
        precision=precision,
        optimizer=workload.optimizer,
        grad_checkpointing=workload.grad_checkpointing,
        compile=workload.compile,
        lora=workload.lora,
        qlora=workload.qlora,
        input_spec=workload.input_spec,
        **more,
    )


class WorkloadFit:
    """One workload's traces (by precision and micro-batch) and evaluations (by GPU and count)."""

    def __init__(self, workload: Workload) -> None:
        self.workload = workload
        self._traces: dict[tuple[str, int | None], Any] = {}
        self.results: dict[tuple[str, int], Evaluation] = {}
        self.traces_made = 0

    def _trace(self, precision: str, batch: int | None) -> Any:
        key = (precision, batch)
        if key not in self._traces:
            self._traces[key] = _fit().trace(_fit_options(self.workload, precision, batch))
            self.traces_made += 1
        return self._traces[key]

    def _evaluate(
        self, traced: Any, spec: GpuSpec, count: int, strategy: str, precision: str
    ) -> Any:
        w = self.workload
        return _fit().evaluate(
            traced,
            gpu=spec,
            gpus=count,
            strategy=strategy,
            precision=precision,
            dataset_size=w.dataset_size,
            epochs=w.epochs,
            tokens=w.tokens,
            fp8=w.fp8,
        )

    def evaluate(self, spec: GpuSpec, count: int) -> Evaluation:
        key = (spec.id, count)
        if key not in self.results:
            self.results[key] = self._compute(spec, count)
        return self.results[key]

    def refused(self, spec: GpuSpec, count: int, precision: str, why: str) -> Evaluation:
        return Evaluation(
            self.workload.name,
            spec.id,
            count,
            False,
            precision,
            "-",
            None,
            1,
            None,
            spec.memory_bytes,
            None,
            None,
            None,
            "refused",
            why,
        )

    def _strategies(self, count: int) -> list[str]:
        if self.workload.strategy != "auto":
            return [self.workload.strategy]
        return ["ddp", "fsdp"] if count > 1 else ["ddp"]

    def _compute(self, spec: GpuSpec, count: int) -> Evaluation:
        w = self.workload
        precision, refused = precision_for(w, spec)
        if refused:
            return self.refused(spec, count, precision, refused)
        traced = self._trace(_as_traced(precision), w.batch_size)
        tried: list[tuple[str, Any]] = []
        for strategy in self._strategies(count):
            try:
                result = self._evaluate(traced, spec, count, strategy, precision)
            except DlrigError as exc:
                # A GPU fit cannot model is an answer for that GPU (a trace error is not).
                return self.refused(spec, count, precision, exc.message)
            tried.append((strategy, result))
            if result.fits:
                return self._from(
                    result, spec, count, strategy, getattr(result, "batch_size", w.batch_size), 1
                )
        # Too big at this micro-batch: keep the global batch with a smaller micro-batch and
        # gradient accumulation. Activations are linear in the batch and the allocator reserve
        # is a share of what is allocated (fit's memory model), so the micro-batch that fits is
        # predicted from this one trace rather than traced again (seconds per trace).
        strategy, last = tried[-1]
        batch = int(getattr(last, "batch_size", 0) or w.batch_size or 0)
        micro_peak = _predict_micro(last, batch, spec.memory_bytes or 0)
        if micro_peak is not None:
            micro, peak = micro_peak
            return self._from(
                last,
                spec,
                count,
                strategy,
                micro,
                math.ceil(batch / micro),
                fits=True,
                peak=peak,
                predicted=True,
            )
        # Nothing fits: show the strategy that came closest (FSDP's sharded peak, not DDP's).
        strategy, closest = min(tried, key=lambda pair: pair[1].memory_peak_bytes)
        return self._from(closest, spec, count, strategy, batch or None, 1, fits=False)

    def _from(
        self,
        result: Any,
        spec: GpuSpec,
        count: int,
        strategy: str,
        micro: int | None,
        accum: int,
        fits: bool | None = None,
        peak: int | None = None,
        predicted: bool = False,
    ) -> Evaluation:
        ok = bool(result.fits) if fits is None else fits
        note = None
        if result.method != "trace":
            note = "ANALYTIC ESTIMATE: the step could not be traced; no time"
        elif predicted:
            note = (
                f"micro-batch {micro} x {accum} accumulation steps keeps the global batch "
                f"(PREDICTED from the batch-{(micro or 1) * accum} trace; time per sample taken at that batch; "
                f"confirm: dlrig fit {self.workload.model} --gpu {spec.id} --batch-size {micro} --grad-accum {accum})"
            )
        elif accum > 1:
            note = f"micro-batch {micro} x {accum} accumulation steps keeps the global batch"
        return Evaluation(
            workload=self.workload.name,
            gpu=spec.id,
            gpus=count,
            fits=ok,
            precision=result.precision or self.workload.precision,
            strategy=strategy,
            micro_batch=micro,
            grad_accum=accum,
            memory_peak_bytes=peak if peak is not None else result.memory_peak_bytes,
            gpu_memory_bytes=getattr(result, "gpu_memory_bytes", spec.memory_bytes),
            step_time_s=result.step_time_s,
            samples_per_s=result.samples_per_s,
            time_per_run_s=result.time_to_train_s if ok else None,
            method=result.method,
            note=note,
        )


def _in_child(workload: Workload, pairs: list[tuple[str, int]]) -> tuple[str, Any, int]:
    """One workload's trace and evaluations, in a worker process."""
    try:
        fitted = WorkloadFit(workload)
        for gpu, count in pairs:
            spec = catalogue().get(gpu)
            if spec is not None:
                fitted.evaluate(spec, count)
    except DlrigError as exc:
        # DlrigError's fix does not survive pickling: send the parts.
        return "error", (isinstance(exc, InputError), exc.message, exc.fix), 0
    return "ok", fitted.results, fitted.traces_made


def evaluate_many(
    workloads: Sequence[Workload],
    pairs: Sequence[tuple[GpuSpec, int]],
    processes: int | None = None,
) -> dict[str, WorkloadFit]:
    """Every workload evaluated on every (GPU, count) pair. Workloads trace in parallel worker
    processes (one per CPU, at most one per workload), forked after torch is imported."""
    fits = {w.name: WorkloadFit(w) for w in workloads}
    ids = list(dict.fromkeys((spec.id, count) for spec, count in pairs))
    workers = min(len(fits), processes or os.cpu_count() or 1)
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        for fitted in fits.values():
            for spec, count in pairs:
                fitted.evaluate(spec, count)
        return fits
    from concurrent.futures import ProcessPoolExecutor

    # Import torch (and transformers, for the presets) once here: the forked workers inherit
    # them instead of each paying the import (DataLoader workers fork after torch the same way).
    for module in ("torch", "transformers"):
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {name: pool.submit(_in_child, f.workload, ids) for name, f in fits.items()}
        for name, future in futures.items():
            status, payload, traces = future.result()
            if status == "error":
                is_input, message, fix = payload
                raise (InputError if is_input else DlrigError)(message, fix=fix)
            fits[name].results.update(payload)
            fits[name].traces_made = traces
    return fits


ALLOCATED = (
    "parameters",
    "gradients",
    "optimizer_state",
    "activations",
    "autocast_weight_copies",
    "gathered_parameters",
    "optimizer_temporaries",
    "communication_buffers",
)


def predicted_peak(result: Any, batch: int, micro: int) -> int | None:
    """Peak memory at a smaller micro-batch from a trace at `batch`: activations scale with the
    batch, the allocator reserve with what is allocated, the rest stays."""
    parts = getattr(result, "memory_breakdown", None) or {}
    activations = parts.get("activations", 0)
    allocated = sum(parts.get(k, 0) for k in ALLOCATED)
    if not activations or not allocated or not result.memory_peak_bytes:
        return None
    reserve_share = parts.get("allocator_reserve", 0) / allocated
    fixed = result.memory_peak_bytes - allocated - parts.get("allocator_reserve", 0)
    smaller = allocated - activations * (1 - micro / batch)
    return int(smaller * (1 + reserve_share) + fixed)


def _predict_micro(result: Any, batch: int, usable: int) -> tuple[int, int] | None:
    """The largest power-of-two micro-batch below `batch` predicted to fit, and its peak."""
    micro = 1 << max(0, (batch - 1).bit_length() - 1) if batch > 1 else 0
    while micro >= 1:
        if micro < batch:
            peak = predicted_peak(result, batch, micro)
            if peak is None:
                return None
            if peak <= usable:
                return micro, peak
        micro //= 2
    return None


def naive_estimate(workload: Workload, spec: GpuSpec, count: int) -> Any:
    """What a plan without trace reuse does: a full `fit.estimate` (a new trace) per pair.
    Only the speed benchmark calls it."""
    precision, _ = precision_for(workload, spec)
    options = _fit_options(
        workload,
        precision,
        workload.batch_size,
        gpu=spec.id,
        gpus=count,
        dataset_size=workload.dataset_size,
        epochs=workload.epochs,
        tokens=workload.tokens,
        search_max_batch=False,
    )
    return _fit().estimate(options)

"""`dlrig fit` predictions against measured training throughput and peak memory, honestly.

benchmarks/data/measured_training.csv holds measured figures from public tables (NVIDIA
DeepLearningExamples, Lambda's GPU benchmarks, timm, MosaicML llm-foundry, torchtitan, LitGPT,
torchtune, Unsloth, …), one source and date per row, and in `settings` the run's configuration
in dlrig's words (preset or config, sequence, precision, optimizer, strategy, …). Rows dlrig
cannot express (MXNet, time-to-train, ...) are listed as skipped with the reason.
torch.compile and Float8 rows (torchtitan) are predicted with `compile=` and `fp8=1`; tensor,
pipeline and context parallel rows with `tp=`, `pp=`, `cp=`, `pp_schedule=` and, for pipelines,
the replica's batch as `micro_batch=` × `grad_accum=` micro-batches.

    python benchmarks/fit_accuracy.py                 # in-sample, held-out, 5-fold, leave-one-family-out
    python benchmarks/fit_accuracy.py --calibrate     # fit the constants on the non-held-out rows
    python benchmarks/fit_accuracy.py --list-held-out # the rows the rule holds out
    python benchmarks/fit_accuracy.py --show torchtitan # every matching row: measured, predicted

The held-out rows are fixed by the rule in benchmarks/data/fit_holdout.md (chosen 2026-12-01,
before recalibration): whole GPU × workload × precision configurations, one in five by a stable
hash. `--calibrate` never evaluates them. k-fold (5 folds of the same groups) and
leave-one-family-out refit the constants on the other rows and predict the left-out ones.
Traces are stored in benchmarks/data/fit_traces/ (fit/store.py: used only while the tracer's
code and versions match, else traced again). Targets (issue 11): held-out median |error| ≤ 12%
for throughput, ≤ 15% for memory. The last line is the key=value summary.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import math
import re
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlrig import fit
from dlrig.errors import DlrigError
from dlrig.fit import checkpointing, context, store
from dlrig.fit.hardware import resolve_model
from dlrig.fit.options import SetupChanges
from dlrig.fit.parallel import mesh_of
from dlrig.knowledge import gpus

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data" / "measured_training.csv"
TRACES = Path(__file__).parent / "data" / "fit_traces"
TARGETS = {"throughput": 0.12, "memory": 0.15}
METRICS = ("train_throughput_total", "train_throughput_per_gpu", "peak_gpu_memory")
GIB = 1024**3

# Machines named in the gpu column: GPUs per node and network per GPU (Gb/s), from NVIDIA's
# DGX datasheets, when the row's settings do not say.
SYSTEMS = {
    "DGX-1": (8, 50.0),  # 4x 100 Gb/s EDR InfiniBand for 8 GPUs
    "DGX-2": (16, 50.0),  # 8x 100 Gb/s EDR for 16 GPUs
    "DGX A100": (8, 200.0),  # 8x 200 Gb/s HDR, one per GPU
}

# Search grids of the fitted constants (fit_calibration.toml [fitted]); a best value on a
# grid's edge is reported, since it means the grid (or the model) is wrong.
GRID: dict[str, list[float]] = {
    "tensor_core_efficiency": [0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0],
    "tf32_efficiency": [0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.9, 1.0],
    "fp32_efficiency": [0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0],
    "nchw_conv_efficiency": [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
    "attention_efficiency": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0],
    "hopper_attention_ratio": [0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.48, 0.55, 0.65, 0.8],
    "memory_bandwidth_efficiency": [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
    "kernel_tail_us": [
        0.0,
        2.0,
        4.0,
        6.0,
        8.0,
        12.0,
        16.0,
        20.0,
        26.0,
        34.0,
        45.0,
        60.0,
        80.0,
        100.0,
    ],
    "min_kernel_us": [2.0, 4.0, 6.0, 8.0, 10.0, 14.0, 20.0, 26.0, 34.0, 45.0],
    "allreduce_efficiency": [0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
}


@dataclass(frozen=True)
class Case:
    row: dict[str, str]
    options: fit.Options
    gpu_id: str
    metric: str
    measured: float  # images|sequences/s total, tokens/s per GPU, or bytes
    memory_kind: str | None  # allocated | reserved | peak | capacity
    family: str
    # the CUDA context the source itself measured (nvidia-smi before the model loaded), MiB:
    # it replaces dlrig's default for the driver/CUDA of today
    context_mib: float | None = None

    @property
    def kind(self) -> str:
        return "memory" if self.metric == "peak_gpu_memory" else "throughput"


def settings_of(row: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in (row.get("settings") or "").split(";"):
        if "=" in item:
            key, value = item.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def group_key(row: dict[str, str]) -> str:
    # measured_inference.csv has `weights` where measured_training.csv has `precision`
    return f"{row['gpu']}|{row['model']}|{row.get('precision', row.get('weights', ''))}"


def _hash(row: dict[str, str]) -> int:
    return int(hashlib.sha256(group_key(row).encode()).hexdigest(), 16)


def held_out(row: dict[str, str]) -> bool:
    """The rule of benchmarks/data/fit_holdout.md (fixed 2026-12-01)."""
    return _hash(row) % 5 == 0


def fold(row: dict[str, str]) -> int:
    return (_hash(row) // 5) % 5


def _gpu_id(text: str) -> str | None:
    name = text.split("(")[0].strip()
    spec = gpus.catalogue().resolve(name)
    if spec is None:  # a bare family name ("H100 (DGX-H100)"): the SKU `dlrig fit` takes it as
        try:
            spec = resolve_model(name)[0]
        except DlrigError:
            return None
    return spec.id if spec else None


def _system(text: str) -> tuple[int, float]:
    for key, value in SYSTEMS.items():
        if key in text:
            return value
    return 8, 200.0


def _bytes(row: dict[str, str]) -> float:
    unit = row["unit"]
    scale = 1e9 if unit.startswith("GB (1e9") else GIB
    return float(row["value"]) * scale


def map_row(row: dict[str, str]) -> Case | str:
    """A Case, or why the row cannot be predicted."""
    metric = row["metric"]
    if metric not in METRICS:
        return f"metric {metric} is not a throughput or peak-memory figure"
    s = settings_of(row)
    if "skip" in s:
        return s["skip"]
    if "preset" not in s and "config" not in s:
        return "no dlrig preset or config for this model"
    if not row["batch_size_per_gpu"].strip():
        return "the row gives no batch size"
    gpu_id = _gpu_id(row["gpu"])
    if gpu_id is None:
        return f"GPU {row['gpu']} is not in the catalogue"
    per_node, network = _system(row["gpu"])
    config = str(ROOT / s["config"]) if "config" in s else None
    name = s.get("preset") or Path(s["config"]).stem

    def integer(key: str) -> int | None:
        return int(s[key]) if key in s else None

    options = fit.Options(
        model=name,
        config=config,
        # pipelined rows: the replica's batch as micro-batches (micro_batch × grad_accum)
        batch_size=integer("micro_batch") or int(float(row["batch_size_per_gpu"])),
        seq_len=integer("seq_len"),
        image_size=integer("image_size"),
        precision=s.get("precision", "auto"),
        optimizer=s.get("optimizer", "adamw"),
        grad_checkpointing=s.get("grad_checkpointing", "none"),
        checkpoint_blocks=checkpointing.parse(s.get("checkpoint_blocks", "1")),
        grad_accum=integer("grad_accum") or 1,
        gpus=int(row["num_gpus"]),
        strategy=s.get("strategy", "ddp"),
        gpu=gpu_id,
        interconnect=s.get("interconnect"),
        gpus_per_node=integer("gpus_per_node") or per_node,
        network_gbps=float(s["network_gbps"]) if "network_gbps" in s else network,
        lora=integer("lora"),
        qlora=integer("qlora"),
        lora_alpha=float(s["lora_alpha"]) if "lora_alpha" in s else None,
        lora_targets=s.get("lora_targets"),
        lora_dropout=float(s.get("lora_dropout", "0")),
        modules_to_save=s.get("modules_to_save"),
        offload=s.get("offload", "none"),
        optimizer_in_backward=s.get("optimizer_in_backward") == "1",
        activation_offload=s.get("activation_offload") == "1",
        kbit_prepare=s.get("kbit_prepare", "1") != "0",
        double_quant=s.get("double_quant", "1") != "0",
        activations=s.get("activations", "model"),
        channels_last=s.get("channels_last") == "1",
        keep_grads=s.get("keep_grads") == "1",
        grad_sync=s.get("grad_sync", "1") != "0",
        fsdp_mixed_units=s.get("fsdp_mixed_units") == "1",
        attention=s.get("attention", "sdpa"),
        optimizer_impl=s.get("optimizer_impl", "foreach"),
        compile=s.get("compile", "none"),
        fp8=s.get("fp8") == "1",
        loss_chunks=integer("loss_chunks") or 0,
        tp=integer("tp") or 1,
        pp=integer("pp") or 1,
        cp=integer("cp") or 1,
        pp_schedule=s.get("pp_schedule", "1f1b"),
        search_max_batch=False,
        advise=False,
    )
    measured = _bytes(row) if metric == "peak_gpu_memory" else float(row["value"])
    family = s.get("family") or name
    context = float(s["cuda_context_mib"]) if "cuda_context_mib" in s else None
    return Case(row, options, gpu_id, metric, measured, s.get("memory"), family, context)


def load(path: Path = DATA) -> tuple[list[Case], dict[str, int], int]:
    rows = list(csv.DictReader(path.open(encoding="utf-8")))
    cases: list[Case] = []
    skipped: dict[str, int] = {}
    for row in rows:
        mapped = map_row(row)
        if isinstance(mapped, Case):
            cases.append(mapped)
        else:
            skipped[mapped] = skipped.get(mapped, 0) + 1
    return cases, skipped, len(rows)


_PREPARED: dict[int, tuple[Any, Any]] = {}


def prepared(case: Case) -> tuple[Any, Any]:
    """(trace, evaluation context) of a case: the expensive part, once per case."""
    if id(case) in _PREPARED:
        return _PREPARED[id(case)]
    o = case.options
    traced = fit.trace(o)
    # every setup option of this case: a trace is cached by its workload fields, so its own
    # options are those of the first case with that workload (torchtune's fused-optimizer and
    # activation-offloading rows had taken their baseline row's)
    ctx = context.resolve(
        traced,
        None,
        {
            name: getattr(o, name)
            for name in SetupChanges.__annotations__
            if name not in ("precision", "optimizer")
        },
    )
    _PREPARED[id(case)] = (traced, ctx)
    return traced, ctx


def unstored(cases: Iterable[Case]) -> list[Case]:
    """The cases whose trace is not in TRACES for this tracer code and these versions."""
    from dlrig.fit.tracing import basis_options, make_workload

    with store.use(TRACES, write=False):
        return [
            c
            for c in cases
            if not (
                store._path(basis_options(c.options, make_workload(c.options))) or TRACES
            ).is_file()
        ]


def predict(case: Case, overrides: dict[str, float] | None = None) -> float:
    traced, ctx = prepared(case)
    o = case.options
    if case.kind == "memory":
        memory = context.memory_at(traced, ctx, traced.batch)
        peak = float(memory.peak_bytes)
        if case.context_mib is not None:
            peak += case.context_mib * 2**20 - memory.breakdown["cuda_context"]
        return float(
            {
                "allocated": memory.allocated_bytes,
                "reserved": memory.reserved_bytes,
            }.get(case.memory_kind or "peak", peak)
        )
    _, step = context.time_at(traced, ctx, traced.batch, overrides)
    replicas = mesh_of(o).dp  # tensor, pipeline and context ranks share their replica's batch
    samples = o.batch_size * replicas * o.grad_accum / step.step_s
    if case.metric == "train_throughput_per_gpu":
        return samples * (traced.workload.tokens_per_sample or 1) / o.gpus
    return samples


def errors(
    cases: Iterable[Case], overrides: dict[str, float] | None = None
) -> list[tuple[float, Case, float]]:
    out = []
    for case in cases:
        predicted = predict(case, overrides)
        out.append((abs(predicted - case.measured) / case.measured, case, predicted))
    return out


def median_error(cases: Sequence[Case], overrides: dict[str, float] | None = None) -> float:
    found = [e for e, _, _ in errors(cases, overrides)]
    return statistics.median(found) if found else 0.0


def calibrate(
    cases: Sequence[Case], rounds: int = 3, quiet: bool = False
) -> tuple[dict[str, float], list[str]]:
    """Coordinate descent over GRID minimising the median |error| of `cases` (throughput
    rows). Returns the constants and the names that ended on their grid's edge."""
    current = {name: context.fitted()[name] for name in GRID}
    best = median_error(cases, current)
    for _ in range(rounds):
        moved = False
        for name, grid in GRID.items():
            for value in grid:
                trial = {**current, name: value}
                score = median_error(cases, trial)
                if score < best - 1e-9:
                    best, current, moved = score, trial, True
        if not moved:
            break
    edges = [n for n, v in current.items() if v in (GRID[n][0], GRID[n][-1])]
    if not quiet:
        print(f"\nfitted on {len(cases)} rows: median |error| {best:.1%}")
        for name, value in current.items():
            print(f"  {name} = {value:g}" + ("   <- ON THE GRID'S EDGE" if name in edges else ""))
    return current, edges


def cross_validated(
    cases: Sequence[Case], groups: Sequence[Sequence[Case]]
) -> tuple[float, dict[int, float]]:
    """Median |error| of each group predicted with constants fitted on the other groups, and
    each case's out-of-group error (by id)."""
    out: dict[int, float] = {}
    for group in groups:
        if not group:
            continue
        left = {id(c) for c in group}
        train = [c for c in cases if id(c) not in left]
        constants, _ = calibrate(train, rounds=2, quiet=True)
        out.update((id(c), e) for e, c, _ in errors(group, constants))
    return (statistics.median(out.values()) if out else 0.0), out


CATEGORIES = (
    "LoRA/QLoRA",
    "TP/PP/CP",
    "FSDP/ZeRO",
    "compile/FP8",
    "LLM, other",
    "vision/BERT/T5",
)


def category(case: Case) -> str:
    """The kind of run a row is, for the per-category figures (issue 24 names these)."""
    o = case.options
    if o.lora or o.qlora:
        return "LoRA/QLoRA"
    if not mesh_of(o).trivial:
        return "TP/PP/CP"
    if o.compile != "none" or o.fp8:
        return "compile/FP8"
    if o.strategy != "ddp" and o.gpus > 1:
        return "FSDP/ZeRO"
    traced, _ = prepared(case)
    return "LLM, other" if traced.workload.task == "causal_lm" else "vision/BERT/T5"


def by_category(
    cases: Sequence[Case], constants: dict[str, float] | None, kfold: dict[int, float]
) -> dict[str, float]:
    """Print median |error| per category and kind: in-sample, held-out and 5-fold (the
    out-of-fold error of every row); return the held-out medians as summary keys."""
    print("\nper category, median |error| (rows): in-sample | held-out | 5-fold (all rows)")
    found = {id(c): e for e, c, _ in errors(cases, constants)}
    summary: dict[str, float] = {}
    for kind in ("throughput", "memory"):
        for name in CATEGORIES:
            rows = [c for c in cases if c.kind == kind and category(c) == name]
            if not rows:
                continue
            cells = []
            for side in (False, True):
                picked = [found[id(c)] for c in rows if held_out(c.row) == side]
                cells.append(
                    f"{statistics.median(picked):6.1%} ({len(picked):3d})" if picked else " " * 12
                )
            folds = [kfold[id(c)] for c in rows if id(c) in kfold]
            cells.append(f"{statistics.median(folds):6.1%}" if folds else "")
            print(f"  {kind:10} {name:15} " + " | ".join(cells))
            held = [found[id(c)] for c in rows if held_out(c.row)]
            if held:
                key = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
                summary[f"{kind}_held_out_{key}"] = statistics.median(held)
    return summary


def report(label: str, rows: list[tuple[float, Case, float]], worst: int = 6) -> float:
    if not rows:
        print(f"{label}: no rows")
        return 0.0
    median = statistics.median(e for e, _, _ in rows)
    print(f"\n{label}: {len(rows)} rows, median |error| {median:.1%}")
    for error, case, predicted in sorted(rows, key=lambda r: -r[0])[:worst]:
        r = case.row
        unit = "GiB" if case.kind == "memory" else r["unit"]
        scale = GIB if case.kind == "memory" else 1.0
        print(
            f"  {error:6.1%}: {r['gpu'][:28]} x{r['num_gpus']} {r['model'][:56]} {r['precision']} "
            f"bs{r['batch_size_per_gpu']}: measured {case.measured / scale:.4g} {unit}, "
            f"predicted {predicted / scale:.4g}"
        )
    return median


# --- inference: serving memory and prefill / decode tokens/s ---------------------------------
INFERENCE_DATA = Path(__file__).parent / "data" / "measured_inference.csv"
INFERENCE_GRID: dict[str, list[float]] = {
    "decode_bandwidth_efficiency": [0.5, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95],
    "prefill_compute_efficiency": [0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 1.0],
    "prefill_quantized_compute_efficiency": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9],
    "decode_step_overhead_us": [0.0, 50.0, 100.0, 200.0, 400.0, 800.0, 1600.0, 2400.0, 3200.0],
    "decode_graph_layer_us": [0.0, 5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 80.0, 100.0],
    "decode_eager_layer_us": [25.0, 50.0, 100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 800.0, 1200.0],
    "decode_quantized_bandwidth_efficiency": [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0],
    "tp_allreduce_us": [5.0, 10.0, 20.0, 30.0, 45.0, 60.0, 80.0, 110.0, 150.0],
}
DEFAULT_PROMPT, DEFAULT_OUTPUT = 8, 128  # rows that do not state them: a short chat prompt


@dataclass(frozen=True)
class InferenceCase:
    row: dict[str, str]
    options: fit.Options
    metric: str  # decode_tokens_per_s | prefill_tokens_per_s | memory
    measured: float
    # a rate the source measured over the whole run, prefill included (settings timing=end_to_end)
    end_to_end: bool = False


def load_inference(path: Path = INFERENCE_DATA) -> list[InferenceCase]:
    out = []
    for row in csv.DictReader(path.open(encoding="utf-8")):
        s = settings_of(row)
        if "skip" in s:
            continue
        gpu_id = _gpu_id(row["gpu"])
        assert gpu_id is not None, row["gpu"]
        prompt = int(row["prompt_tokens"] or DEFAULT_PROMPT) or 1
        output = int(row["output_tokens"] or DEFAULT_OUTPUT)
        options = fit.Options(
            model=Path(s["config"]).stem,
            config=str(ROOT / s["config"]),
            inference=True,
            gpu=gpu_id,
            batch_size=int(row["batch_size"]),
            seq_len=prompt,
            context=prompt + output,
            weights=s.get("weights"),
            engine=s.get("engine"),
            gpus=int(row.get("num_gpus") or 1),
        )
        measured = _bytes(row) if row["metric"] == "memory" else float(row["value"])
        end_to_end = s.get("timing") == "end_to_end"
        out.append(InferenceCase(row, options, row["metric"], measured, end_to_end))
    return out


_SERVING: dict[int, Any] = {}


def predict_inference(case: InferenceCase, overrides: dict[str, float] | None = None) -> float:
    from dlrig.fit import inference

    if id(case) not in _SERVING:
        _SERVING[id(case)] = inference.serving(case.options, None)
    served = _SERVING[id(case)].plan(overrides)
    return float(
        {
            "decode_tokens_per_s": served[
                "end_to_end_output_tokens_per_s" if case.end_to_end else "decode_tokens_per_s"
            ],
            "prefill_tokens_per_s": served["prefill_tokens_per_s"],
            "memory": served["allocated_per_gpu_bytes"],
        }[case.metric]
    )


def inference_errors(
    cases: Iterable[InferenceCase], overrides: dict[str, float] | None = None
) -> list[tuple[float, InferenceCase, float]]:
    out = []
    for case in cases:
        predicted = predict_inference(case, overrides)
        out.append((abs(predicted - case.measured) / case.measured, case, predicted))
    return out


def calibrate_inference(cases: Sequence[InferenceCase]) -> tuple[dict[str, float], list[str]]:
    """Coordinate descent of the inference constants on `cases`: mean |log(predicted/measured)|
    (few rows, each constant governing a handful: a median would ignore the TP and quantised
    rows that alone pin tp_allreduce_us and the quantised efficiency)."""
    current = {name: context.fitted()[name] for name in INFERENCE_GRID}

    def score(values: dict[str, float]) -> float:
        found = [
            abs(math.log(p / c.measured)) for _, c, p in inference_errors(cases, values) if p > 0
        ]
        return statistics.fmean(found) if found else 0.0

    best = score(current)
    for _ in range(3):
        for name, grid in INFERENCE_GRID.items():
            for value in grid:
                trial = {**current, name: value}
                trial_score = score(trial)
                if trial_score < best - 1e-9:
                    best, current = trial_score, trial
    edges = [n for n, v in current.items() if v in (INFERENCE_GRID[n][0], INFERENCE_GRID[n][-1])]
    print(f"\ninference constants fitted on {len(cases)} rows: mean |log error| {best:.3f}")
    for name, value in current.items():
        print(f"  {name} = {value:g}" + ("   <- ON THE GRID'S EDGE" if name in edges else ""))
    return current, edges


def report_inference(label: str, rows: list[tuple[float, InferenceCase, float]]) -> float:
    if not rows:
        print(f"{label}: no rows")
        return 0.0
    median = statistics.median(e for e, _, _ in rows)
    print(f"\n{label}: {len(rows)} rows, median |error| {median:.1%}")
    for error, case, predicted in sorted(rows, key=lambda r: -r[0]):
        r = case.row
        scale = 1e9 if case.metric == "memory" else 1.0
        print(
            f"  {error:6.1%}: {r['gpu'][:16]} {r['model'][:60]} bs{r['batch_size']} {case.metric}: "
            f"measured {case.measured / scale:.4g}, predicted {predicted / scale:.4g}"
        )
    return median


def show(cases: Sequence[Case]) -> None:
    """One line per case: held out or not, settings that matter, measured, predicted, error."""
    for error, case, value in errors(cases):
        r, o, unit = case.row, case.options, GIB if case.kind == "memory" else 1.0
        print(
            f"{'held out' if held_out(r) else 'in-sample'} | {r['gpu']} x{r['num_gpus']} | "
            f"{r['model']} | compile={o.compile} fp8={int(o.fp8)} | {case.metric}: measured "
            f"{case.measured / unit:.4g}, predicted {value / unit:.4g} "
            f"({(value - case.measured) / case.measured:+.1%}, |error| {error:.1%})"
        )


def split(cases: Sequence[Case]) -> dict[str, list[Case]]:
    out: dict[str, list[Case]] = {}
    for case in cases:
        side = "held_out" if held_out(case.row) else "train"
        out.setdefault(f"{case.kind}_{side}", []).append(case)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--calibrate", action="store_true", help="fit the constants (training rows)"
    )
    parser.add_argument("--skip-cv", action="store_true", help="no k-fold / leave-one-family-out")
    parser.add_argument("--list-held-out", action="store_true", help="print the held-out rows")
    parser.add_argument(
        "--show",
        metavar="TEXT",
        help="print measured and predicted for every row whose source or model contains TEXT",
    )
    args = parser.parse_args()
    started = time.perf_counter()
    cases, skipped, total = load()
    if args.list_held_out:
        for case in cases:
            if held_out(case.row):
                r = case.row
                print(
                    f"{r['gpu']} x{r['num_gpus']} | {r['model']} | {r['precision']} | {r['metric']}"
                )
        return
    if args.show:
        with store.use(TRACES):
            show([c for c in cases if args.show in c.row["source"] + c.row["model"]])
        return
    print(f"{total} rows: {len(cases)} predicted")
    for reason, count in sorted(skipped.items(), key=lambda item: -item[1]):
        print(f"  skipped {count:3d}: {reason}")
    with store.use(TRACES):
        for case in cases:
            prepared(case)
    parts = split(cases)
    print(
        "rows: "
        + ", ".join(f"{k} {len(v)}" for k, v in sorted(parts.items()))
        + f" (traces ready in {time.perf_counter() - started:.0f} s)"
    )
    constants: dict[str, float] | None = None
    edges: list[str] = []
    if args.calibrate:
        constants, edges = calibrate(parts.get("throughput_train", []))
    summary: dict[str, float] = {}
    for kind in ("throughput", "memory"):
        summary[f"{kind}_in_sample"] = report(
            f"{kind}, calibration rows (in-sample)",
            errors(parts.get(f"{kind}_train", []), constants),
        )
        summary[f"{kind}_held_out"] = report(
            f"{kind}, held-out rows", errors(parts.get(f"{kind}_held_out", []), constants)
        )
    # the memory model has no fitted constant: every memory row is out of sample
    summary["memory_all_rows"] = report(
        "memory, every row (no memory constant is fitted: all out of sample)",
        errors(parts.get("memory_train", []) + parts.get("memory_held_out", []), constants),
        worst=0,
    )
    kfold: dict[int, float] = {}
    if not args.skip_cv:
        throughput = [c for c in cases if c.kind == "throughput"]
        folds = [[c for c in throughput if fold(c.row) == k] for k in range(5)]
        families = sorted({c.family for c in throughput})
        summary["throughput_kfold5"], kfold = cross_validated(throughput, folds)
        summary["throughput_leave_one_family_out"], _ = cross_validated(
            throughput, [[c for c in throughput if c.family == f] for f in families]
        )
        print(f"\n5-fold and leave-one-family-out ({', '.join(families)}): refitted per fold")
        # memory has no fitted constant: a row's 5-fold error is its error
        kfold.update((id(c), e) for e, c, _ in errors([c for c in cases if c.kind == "memory"]))
    summary.update(by_category(cases, constants, kfold))
    served = load_inference()
    inference_train = [c for c in served if not held_out(c.row)]
    inference_test = [c for c in served if held_out(c.row)]
    inference_constants = None
    if args.calibrate:
        inference_constants, inference_edges = calibrate_inference(inference_train)
        edges += inference_edges
    summary["inference_in_sample"] = report_inference(
        "inference, calibration rows", inference_errors(inference_train, inference_constants)
    )
    summary["inference_held_out"] = report_inference(
        "inference, held-out rows", inference_errors(inference_test, inference_constants)
    )
    summary["constants_on_grid_edge"] = float(len(edges))
    summary["seconds"] = time.perf_counter() - started
    print()
    print(" ".join(f"{k}={v:.3f}" for k, v in summary.items()))
    if summary["throughput_held_out"] > TARGETS["throughput"] or (
        summary["memory_held_out"] > TARGETS["memory"]
    ):
        sys.exit(1)


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()

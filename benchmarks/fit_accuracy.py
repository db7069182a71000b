"""`dlrig fit` predictions against every calibration row that maps to a preset.

benchmarks/data/measured_training.csv (a copy of shared/data/calibration) holds measured
throughput and peak memory from public benchmark tables. Rows whose model, precision and
parallelism dlrig's options can express are predicted; the others are listed as skipped with
the reason (torch.compile, Float8, tensor/pipeline parallelism, models without a preset,
rows without a batch size).

    python benchmarks/fit_accuracy.py              # report median / worst errors
    python benchmarks/fit_accuracy.py --calibrate  # grid-search the fitted constants

Targets: median absolute error <= 20% for throughput, <= 15% for memory.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from dlrig import fit
from dlrig.fit import presets, timing
from dlrig.knowledge import gpus

DATA = Path(__file__).parent / "data" / "measured_training.csv"

# System facts for the rows' machines (NVIDIA DGX datasheets): GPUs per node, network per GPU.
SYSTEMS = {
    "DGX-1": (8, 50.0),  # 4x 100 Gb/s EDR InfiniBand for 8 GPUs
    "DGX-2": (16, 50.0),  # 8x 100 Gb/s EDR for 16 GPUs
    "DGX-2H": (16, 50.0),
    "DGX A100": (8, 200.0),  # 8x 200 Gb/s HDR, one per GPU
    "500W cap": (8, 400.0),  # torchtitan's H100 cluster: assumed one 400 Gb/s NIC per GPU
}


@dataclass(frozen=True)
class Case:
    row: dict[str, str]
    options: fit.Options
    gpu_id: str
    metric: str
    measured: float


def _gpu_id(text: str) -> str | None:
    name = text.split("(")[0].strip()
    spec = gpus.catalogue().resolve(name)
    return spec.id if spec else None


def _system(text: str) -> tuple[int, float]:
    for key, value in SYSTEMS.items():
        if key in text:
            return value
    return 8, 200.0


def map_row(row: dict[str, str]) -> Case | str:
    """A Case, or why the row does not map to a preset."""
    model, metric = row["model"], row["metric"]
    if metric not in ("train_throughput_total", "train_throughput_per_gpu", "peak_gpu_memory"):
        return f"metric {metric} is not a throughput or memory figure"
    if "compile" in model or "Float8" in model or "FP8" in row["precision"]:
        return "uses torch.compile or Float8, which dlrig fit does not model"
    if "TP" in model or "PP" in model or "CP" in model:
        return "tensor/pipeline/context parallelism is not a dlrig fit strategy"
    if not row["batch_size_per_gpu"].strip():
        return "the row gives no batch size"
    batch = int(float(row["batch_size_per_gpu"]))
    precision = {"FP32": "fp32", "TF32": "tf32", "AMP": "amp-fp16", "BF16": "amp-bf16"}.get(
        row["precision"]
    )
    if precision is None:
        return f"precision {row['precision']} has no dlrig equivalent"
    gpu_id = _gpu_id(row["gpu"])
    if gpu_id is None:
        return f"GPU {row['gpu']} is not in the catalogue"
    per_node, network = _system(row["gpu"])
    shared = {
        "batch_size": batch,
        "precision": precision,
        "gpus": int(row["num_gpus"]),
        "gpu": gpu_id,
        "gpus_per_node": per_node,
        "network_gbps": network,
        "search_max_batch": False,
    }
    if model.startswith("ResNet-50"):
        options = fit.Options(
            model="resnet50", image_size=224, optimizer="sgd-momentum", strategy="ddp", **shared
        )
    elif model.startswith("BERT-large") and (
        "seq128" in model or "seq512" in model or "seq384" in model
    ):
        seq = 128 if "seq128" in model else 512 if "seq512" in model else 384
        options = fit.Options(
            model="bert-large", seq_len=seq, optimizer="adamw", strategy="ddp", **shared
        )
    elif model.startswith("Llama-3.1-8B pretrain seq8192") and "FSDP" in model:
        options = fit.Options(
            model="llama3-8b",
            seq_len=8192,
            optimizer="adamw",
            strategy="fsdp",
            grad_checkpointing="selective" if "selective" in model else "full",
            **shared,
        )
    else:
        return "no preset for this model"
    return Case(row, options, gpu_id, metric, float(row["value"]))


_TRACES: dict[tuple, object] = {}


def _trace(options: fit.Options):
    key = (
        options.model,
        options.batch_size,
        options.seq_len,
        options.image_size,
        options.precision,
        options.grad_checkpointing,
        options.optimizer,
    )
    if key not in _TRACES:
        workload = presets.preset_workload(options.model, options.seq_len, options.image_size)
        _TRACES[key] = (fit._trace(workload, options, options.batch_size), workload)
    return _TRACES[key]


def predict(case: Case, overrides: dict[str, float] | None = None) -> float:
    trace, workload = _trace(case.options)
    spec = gpus.catalogue().get(case.gpu_id)
    if case.metric == "peak_gpu_memory":
        convolutional = any("convolution" in op.name for op in trace.ops)
        memory = fit._memory(trace, case.options, convolutional, overrides)
        return memory.reserved_bytes / 1024**3  # the tables report torch's reserved memory, in GiB
    setup = fit._time_setup(case.options, spec, case.options.gpus, overrides)
    step = timing.step_time(trace, spec, setup).step_s
    samples = case.options.batch_size * case.options.gpus / step
    if case.metric == "train_throughput_per_gpu":
        return samples * (workload.tokens_per_sample or 1) / case.options.gpus
    return samples


def errors(
    cases: list[Case], overrides: dict[str, float] | None = None
) -> list[tuple[float, Case, float]]:
    out = []
    for case in cases:
        predicted = predict(case, overrides)
        out.append((abs(predicted - case.measured) / case.measured, case, predicted))
    return out


def report(label: str, rows: list[tuple[float, Case, float]]) -> float:
    if not rows:
        print(f"{label}: no rows")
        return 0.0
    median = statistics.median(e for e, _, _ in rows)
    print(f"\n{label}: {len(rows)} rows, median |error| {median:.1%}")
    for error, case, predicted in sorted(rows, key=lambda r: -r[0])[:6]:
        r = case.row
        print(
            f"  worst {error:6.1%}: {r['gpu']} x{r['num_gpus']} {r['model'][:48]} {r['precision']} bs{r['batch_size_per_gpu']}: "
            f"measured {case.measured:g} {r['unit']}, predicted {predicted:.4g}"
        )
    return median


def calibrate(throughput: list[Case]) -> dict[str, float]:
    grid = {
        "matmul_efficiency_of_mamf": [0.6, 0.7, 0.8, 0.9, 1.0],
        "memory_bandwidth_efficiency": [0.5, 0.6, 0.7, 0.8, 0.9, 1.0],
        "min_kernel_us": [2.0, 4.0, 6.0],
        "allreduce_efficiency": [0.6, 0.8],
    }
    best: tuple[float, dict[str, float]] | None = None
    for values in itertools.product(*grid.values()):
        overrides = dict(zip(grid, values, strict=True))
        median = statistics.median(e for e, _, _ in errors(throughput, overrides))
        if best is None or median < best[0]:
            best = (median, overrides)
    assert best is not None
    print(f"best median |error| {best[0]:.1%} with {best[1]}")
    return best[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibrate", action="store_true", help="grid-search the fitted constants")
    args = parser.parse_args()
    rows = list(csv.DictReader(DATA.open(encoding="utf-8")))
    cases: list[Case] = []
    skipped: dict[str, int] = {}
    for row in rows:
        mapped = map_row(row)
        if isinstance(mapped, Case):
            cases.append(mapped)
        else:
            skipped[mapped] = skipped.get(mapped, 0) + 1
    print(f"{len(rows)} calibration rows: {len(cases)} map to a preset")
    for reason, count in sorted(skipped.items(), key=lambda item: -item[1]):
        print(f"  skipped {count:3d}: {reason}")
    throughput = [c for c in cases if c.metric != "peak_gpu_memory"]
    memory = [c for c in cases if c.metric == "peak_gpu_memory"]
    overrides = calibrate(throughput) if args.calibrate else None
    t = report("throughput", errors(throughput, overrides))
    m = report("memory", errors(memory, overrides))
    print(f"\nmedian |error|: throughput {t:.1%} (target <= 20%), memory {m:.1%} (target <= 15%)")
    if t > 0.20 or m > 0.15:
        sys.exit(1)


if __name__ == "__main__":
    replace  # noqa: B018 - keep dataclasses.replace importable for interactive use
    main()

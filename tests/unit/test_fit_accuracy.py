"""What `dlrig fit` claims about its accuracy, checked on measured rows it was not fitted on.

benchmarks/fit_accuracy.py predicts every row of benchmarks/data/measured_training.csv and
measured_inference.csv (published measurements, one source each). The held-out rows are fixed by
the rule in benchmarks/data/fit_holdout.md; the committed constants (fit_calibration.toml
[fitted]) were fitted on the other rows. The traces come from benchmarks/data/fit_traces/, which
fit/store.py uses only while the tracer's code and the torch/transformers/peft versions are the
ones that wrote them; anything else is traced again (correct, only slower).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import statistics
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from dlrig.fit import context, store

# One worker builds the corpus of traces once (module fixture), not both.
pytestmark = pytest.mark.xdist_group("fit_accuracy")

ROOT = Path(__file__).resolve().parents[2]


def _benchmark():
    spec = importlib.util.spec_from_file_location(
        "fit_accuracy", ROOT / "benchmarks" / "fit_accuracy.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fit_accuracy"] = module
    spec.loader.exec_module(module)
    return module


fa = _benchmark()


@pytest.fixture(scope="module")
def predicted():
    """(error, case, prediction) of every training-table row, committed constants."""
    cases, _, _ = fa.load()
    missing = fa.unstored(cases)
    if missing:
        warnings.warn(
            f"{len(missing)} traces are not stored for this tracer/versions: tracing them "
            "(slow); refresh with `python benchmarks/fit_accuracy.py`",
            stacklevel=1,
        )
    with store.use(fa.TRACES, write=False):
        return fa.errors(cases)


def _median(rows) -> float:
    return statistics.median(e for e, _, _ in rows)


def _side(rows, kind: str, held: bool):
    return [r for r in rows if r[1].kind == kind and fa.held_out(r[1].row) == held]


def test_held_out_throughput_meets_the_target(predicted):
    held = _side(predicted, "throughput", True)
    assert len(held) >= 60
    assert _median(held) <= fa.TARGETS["throughput"], _median(held)


def test_memory_rows_are_all_out_of_sample_and_meet_the_target(predicted):
    """No constant is fitted on a memory row (the memory model has no [fitted] constant), so
    every measured peak-memory row is out of sample: their median meets the 15% target."""
    every = [r for r in predicted if r[1].kind == "memory"]
    assert len(every) >= 30
    assert _median(every) <= fa.TARGETS["memory"], _median(every)


def test_held_out_memory_meets_the_target(predicted):
    held = _side(predicted, "memory", True)
    assert len(held) >= 5
    assert _median(held) <= fa.TARGETS["memory"], _median(held)


def test_in_sample_is_not_far_better_than_held_out(predicted):
    """A held-out error far above the in-sample one would mean the constants learnt the rows."""
    train = _median(_side(predicted, "throughput", False))
    held = _median(_side(predicted, "throughput", True))
    assert held <= train + 0.05, (train, held)


def test_fitted_constants_are_inside_their_grids():
    fitted = context.fitted()
    for grids in (fa.GRID, fa.INFERENCE_GRID):
        for name, grid in grids.items():
            assert grid[0] < fitted[name] < grid[-1], (name, fitted[name], grid)
    source = context.calibration()["fitted"]["source"]
    assert "held out" in source and "fit_accuracy.py" in source


def test_the_rule_file_fixes_the_split_and_its_date():
    text = (ROOT / "benchmarks" / "data" / "fit_holdout.md").read_text()
    assert re.search(r"Fixed on \*\*\d{4}-\d{2}-\d{2}\*\*", text)
    assert "% 5 == 0" in text and "{gpu}|{model}|{precision}" in text
    row = {"gpu": "A100-SXM4-80GB", "model": "x", "precision": "AMP"}
    import hashlib

    digest = int(hashlib.sha256(b"A100-SXM4-80GB|x|AMP").hexdigest(), 16)
    assert fa.held_out(row) == (digest % 5 == 0)
    # one configuration's rows fall on one side whatever their batch, GPU count or metric
    a = {**row, "num_gpus": "1", "batch_size_per_gpu": "8", "metric": "train_throughput_total"}
    b = {**row, "num_gpus": "8", "batch_size_per_gpu": "64", "metric": "peak_gpu_memory"}
    assert fa.held_out(a) == fa.held_out(b)


def _lora_7_8b_memory(predicted):
    out = []
    for error, case, value in predicted:
        s = fa.settings_of(case.row)
        config = s.get("config", "")
        if case.kind != "memory" or not ("lora" in s or "qlora" in s):
            continue
        if any(size in config for size in ("7b", "8b")):
            out.append((error, case, value))
    return out


def test_lora_and_qlora_memory_of_7_8b_models_against_published_figures(predicted):
    """LitGPT (A100 40 GB and A10G tables) and Unsloth's HF+FA2 baseline: at least five
    published peak-memory figures of 7-8B LoRA/QLoRA runs within 15%, and the median of all
    of them too."""
    rows = _lora_7_8b_memory(predicted)
    sources = {case.row["source"].split(":")[0] for _, case, _ in rows}
    assert {"Lightning-AI/litgpt", "unslothai/unsloth"} <= sources
    within = [case.row["model"] for error, case, _ in rows if error <= 0.15]
    assert len(within) >= 5, within
    assert _median(rows) <= 0.15


def test_unsloth_longest_contexts_fit_their_gpus(predicted):
    """Unsloth's HF+FA2 column is the longest context that fit each GPU: dlrig's peak there is
    within 15% of the card's memory (it neither calls it far too small nor far too big)."""
    rows = [r for r in predicted if "unsloth" in r[1].row["source"]]
    assert len(rows) >= 6
    for error, case, value in rows:
        assert error <= 0.15, (case.row["gpu"], case.row["model"], value / 2**30)


def test_torchtitan_compiled_and_float8_runs(predicted):
    """torchtitan's Llama 3.1 8B on H100 (FSDP, selective checkpointing, 8k tokens), 2024:
    peak memory of the torch.compile and Float8 runs within 5%, and Float8's speed-up over
    compile within 10% of the measured one."""
    rows = [
        (error, case, value)
        for error, case, value in predicted
        if "llama3_h100_202412_torchtitan" in case.row["source"]
        and case.options.compile != "none"
        and case.options.grad_checkpointing == "selective"
    ]
    memory = [r for r in rows if r[1].kind == "memory"]
    assert len(memory) == 4
    for error, case, value in memory:
        assert error <= 0.05, (case.row["num_gpus"], case.options.fp8, value / 2**30)
    speed = {
        (case.row["num_gpus"], case.options.fp8): (case.measured, value)
        for _, case, value in rows
        if case.kind == "throughput"
    }
    for gpus in ("8", "128"):
        (bf16_measured, bf16), (fp8_measured, fp8) = speed[gpus, False], speed[gpus, True]
        assert fp8 / bf16 == pytest.approx(fp8_measured / bf16_measured, rel=0.10)


def test_torchtitan_tensor_pipeline_and_context_parallel_runs(predicted):
    """torchtitan's 2024 tables 2, 4, 5 and 6 (Llama 3.1 8B with CP, 70B with TP 8, 405B with
    TP 8 × PP 8, with and without CP; full checkpointing, compile, Float8): peak memory of
    every row within 10%, throughput median within 32%; the pipeline's schedules ordered as
    measured (interleaved 1F1B faster and smaller). Since 2026-12-07 attention under
    checkpointing is traced causal (it had been traced at twice its FLOPs, which hid how slow
    these runs' attention is): context parallel 1-2 and TP 8 come out 6-18% fast, context
    parallel 4-8 and the pipelines 26-52% fast (median 30.8%; it was 15% with the bug)."""
    rows = [
        (error, case, value)
        for error, case, value in predicted
        if "llama3_h100_202412_torchtitan" in case.row["source"]
        and case.options.grad_checkpointing == "full"
    ]
    memory = [r for r in rows if r[1].kind == "memory"]
    assert len(memory) == 12
    for error, case, value in memory:
        assert error <= 0.10, (case.row["model"], value / 2**30)
    speed = [error for error, case, _ in rows if case.kind == "throughput"]
    assert len(speed) == 12
    assert statistics.median(speed) <= 0.32
    pipelines = {
        (case.kind, case.options.pp_schedule): value
        for _, case, value in rows
        if case.options.pp > 1 and case.options.cp == 1 and case.options.seq_len == 8192
    }
    assert pipelines["throughput", "interleaved-1f1b"] > pipelines["throughput", "1f1b"]
    assert pipelines["memory", "interleaved-1f1b"] < pipelines["memory", "1f1b"]


def test_transformers_single_gpu_guide_memory(predicted):
    """transformers' 'Efficient Training on a Single GPU' (V100 16 GB, bert-large): nvidia-smi
    memory after training for its nine recipes, each within 15%."""
    rows = [
        r for r in predicted if r[1].kind == "memory" and "perf_train_gpu_one" in r[1].row["source"]
    ]
    assert len(rows) == 9
    for error, case, value in rows:
        assert error <= 0.15, (case.row["model"], value / 2**30)


def test_inference_against_published_measurements():
    """gpt-fast (A100, TP 1-8), llama.cpp, MLC, LitGPT, and since 2026-12-07 TensorRT-LLM's,
    LMDeploy's, MLC llm-perf-bench's, AutoAWQ's, llm-awq's, torchao's and premAI's tables
    (224 rows, batch 1 to 1,280, int4/int8/fp8/16-bit): decode/prefill tokens/s and memory; TP
    degree as the rows state. The 203 rows added that day were measured once with the
    constants of the time (held-out median 42.5%); with a decode step timed as the weights'
    GEMMs plus the attention over the KV cache (separate kernels), a CUDA-graph step's floor
    per layer, and the constants refitted on the rest, in-sample 12.1% and held-out 11.7%;
    batch >= 64 at 16.2%."""
    served = fa.load_inference()
    rows = fa.inference_errors(served)
    sources = {case.row["source"].split(" ")[0].split(":")[0] for _, case, _ in rows}
    assert len(sources) >= 10, sources
    assert len(rows) >= 200
    assert statistics.median(e for e, _, _ in rows) <= 0.15
    memory = [r for r in rows if r[1].metric == "memory"]
    assert memory and all(e <= 0.05 for e, _, _ in memory)
    tp = [r for r in rows if r[1].options.gpus > 1]
    assert len(tp) >= 30
    held = [r for r in rows if fa.held_out(r[1].row)]
    assert held and statistics.median(e for e, _, _ in held) <= 0.15
    # large batches (TensorRT-LLM's FP8 and FP16 tables, LMDeploy's): the whole run's rate,
    # prefill included, where the issue found FP8 decode 60-96% high
    large = [r for r in rows if r[1].options.batch_size >= 64]
    assert len(large) >= 15 and statistics.median(e for e, _, _ in large) <= 0.17


def test_litgpt_multi_gpu_lora_keeps_its_frozen_gradients(predicted):
    """LitGPT's 2 x and 4 x A100 LoRA rows (FSDP1 by Block with use_orig_params=True, 128 /
    micro-batch accumulation under no_sync): each GPU holds unsharded gradients for the
    frozen weights too, so a 13B LoRA over 4 GPUs peaks above its single-GPU bf16 weights.
    Each row within 10%; read as FSDP2 (adapters alone get gradients) they are 45-75% low."""
    rows = [
        r for r in predicted if "resource-tables" in r[1].row["source"] and r[1].options.gpus > 1
    ]
    assert len(rows) == 4
    for error, case, value in rows:
        assert case.options.fsdp_mixed_units and not case.options.grad_sync
        assert error <= 0.10, (case.row["model"], value / 2**30)
        with store.use(fa.TRACES, write=False):
            plain = fa.predict(
                dataclasses.replace(
                    case,
                    options=dataclasses.replace(
                        case.options, fsdp_mixed_units=False, grad_sync=True
                    ),
                )
            )
        assert plain < 0.6 * case.measured


def test_published_lora_and_qlora_runs(predicted):
    """LoRA/QLoRA throughput rows from Answer.AI's fsdp_qlora benchmarks (2 x RTX 3090/4090,
    with and without CPU offload), Qwen's README (A100, 7B-72B, seq 256-8192) and NeMo
    AutoModel (H100), added 2026-12-07 and measured once before any change: 20.6% median on
    the 32 first predictable (memory 14.2% on 25), and 26-32% slow on the six offloaded runs
    made predictable later that day. dlrig is slow on every source (median -17% to -30%), a
    bias not found without a GPU (docs/known-gaps.md); the held-out eight were at 13.3%, all
    35 at 27.2%. With a kernel's tail capped at its own work (the adapters' small matmuls):
    13.0% held out, 13.1% over all 37."""
    rows = [r for r in predicted if fa.category(r[1]) == "LoRA/QLoRA" and r[1].kind == "throughput"]
    assert len(rows) >= 35
    assert statistics.median(e for e, _, _ in rows) <= 0.16
    held = [e for e, case, _ in rows if fa.held_out(case.row)]
    assert len(held) >= 8 and statistics.median(held) <= 0.15


def test_every_measured_matmul_ceiling_is_the_one_its_rows_give():
    """Each GPU's [mamf_ratio] in fit_calibration.toml is what the measured_training.csv rows
    of that GPU say: the MAMF search's figure (stas00/ml-engineering) where it has one, else
    the median of the square-matmul rows (zzc0721), over the catalogue's bf16 peak."""
    import csv

    from dlrig.knowledge import gpus

    rows: dict[str, list[tuple[bool, float]]] = {}
    with (ROOT / "benchmarks" / "data" / "measured_training.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if row["metric"] != "max_achievable_matmul_tflops" or row["precision"] != "BF16":
                continue
            gpu = fa._gpu_id(row["gpu"])
            if gpu is not None:
                search = row["source"].startswith("stas00/")
                rows.setdefault(gpu, []).append((search, float(row["value"])))
    ratios = context.calibration()["mamf_ratio"]
    checked = 0
    for gpu, values in rows.items():
        assert gpu in ratios, f"{gpu} has measured matmul rows but no [mamf_ratio] entry"
        searched = [v for s, v in values if s]
        figure = max(searched) if searched else statistics.median(v for _, v in values)
        spec = gpus.catalogue().get(gpu)
        assert spec is not None, gpu
        peak = spec.bf16_tflops
        assert peak, gpu
        assert ratios[gpu] == pytest.approx(figure / peak, abs=0.002), gpu
        checked += 1
    assert checked >= 15
    # GeForce cards boost past the clock their datasheet peak is quoted at
    assert ratios["rtx-3090"] > 1.0 and ratios["rtx-4090"] > 0.95

"""Ground truth for `dlrig fit`: a real training step's memory and time beside fit's prediction.

    python benchmarks/gpu_fit_truth.py [--out out/gpu-suite/fit_truth.json] [--gpu h200-sxm-141gb]

For each configuration the real model is built from the same preset config fit uses (random
weights: nothing is downloaded), trained for a few steps with the same precision and optimizer,
and measured: `torch.cuda.max_memory_allocated`, `max_memory_reserved`, the process's memory as
nvidia-smi shows it (NVML's per-process figure), and the median step time. `dlrig fit` predicts
the same configuration on the catalogue GPU. The last line is a key=value summary with the median
errors. Device-agnostic: the CPU run (tests/unit/test_gpu_fit_truth.py) checks the harness itself.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Case:
    name: str
    preset: str
    batch_size: int
    seq_len: int | None = None
    image_size: int | None = None
    precision: str = "amp-bf16"
    lora: int | None = None
    layers: int | None = None  # a shallower copy, for the CPU check of this harness


CASES = (
    Case("resnet50-b128", "resnet50", 128, image_size=224),
    Case("bert-large-b32-s512", "bert-large", 32, seq_len=512),
    Case("gpt2-xl-b4-s512", "gpt2-xl", 4, seq_len=512),
    Case("gpt2-xl-b4-s1024", "gpt2-xl", 4, seq_len=1024),
    Case("llama3-8b-lora16-b1-s2048", "llama3-8b", 1, seq_len=2048, lora=16),
)


def build(case: Case, device: str) -> tuple[Any, dict[str, Any]]:
    """The preset's model (as fit builds it, with real random weights) and one batch."""
    import torch
    import transformers

    from dlrig.fit import presets

    preset = presets.presets()[case.preset]
    settings = dict(preset.config)
    if case.layers is not None:
        for key in ("num_hidden_layers", "n_layer", "num_layers"):
            if key in settings:
                settings[key] = case.layers
        if "depths" in settings:  # ResNet stages
            settings["depths"] = [1 for _ in settings["depths"]]
    config = getattr(transformers, preset.config_class)(**settings)
    model_class = getattr(transformers, preset.model_class)
    if getattr(model_class, "_supports_sdpa", False):
        config._attn_implementation = "sdpa"  # fit assumes the fused attention kernel
    peft_base = case.lora is not None
    dtype = torch.bfloat16 if peft_base else torch.float32
    with torch.device(device):
        model = model_class(config).to(dtype)
    if peft_base:
        import peft

        targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
        model = peft.get_peft_model(
            model, peft.LoraConfig(r=case.lora, lora_alpha=2 * case.lora, target_modules=targets)
        )
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.data = parameter.data.float()
    batch = case.batch_size
    if preset.task == "image_classification":
        size = case.image_size or preset.image_size or 224
        inputs = {
            "pixel_values": torch.randn(batch, 3, size, size, device=device),
            "labels": torch.randint(0, config.num_labels, (batch,), device=device),
        }
    else:
        seq = case.seq_len or preset.seq_len or 512
        ids = torch.randint(0, config.vocab_size, (batch, seq), device=device)
        inputs = {"input_ids": ids, "labels": ids}
        if preset.task == "bert_pretraining":
            inputs = {
                "input_ids": ids,
                "labels": ids,
                "next_sentence_label": torch.zeros(batch, dtype=torch.long, device=device),
            }
    return model, inputs


def process_memory_bytes() -> int | None:
    """This process's GPU memory as nvidia-smi shows it (NVML), or None without NVML."""
    try:
        import pynvml  # noqa: TID251 - the raw truth, beside dlrig's own gate

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            for process in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if process.pid == os.getpid():
                    return int(process.usedGpuMemory)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML, no process figure
        return None
    return None


def measure(case: Case, device: str, steps: int = 6) -> dict[str, Any]:
    """Train `steps` real steps; memory peaks and the median time of the steps after warm-up."""
    import torch

    model, inputs = build(case, device)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-5, foreach=True)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    autocast_dtype = torch.bfloat16 if "bf16" in case.precision else torch.float16
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        with torch.autocast(device.split(":")[0], dtype=autocast_dtype):
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    measured: dict[str, Any] = {"step_time_s": statistics.median(times[2:] or times)}
    if cuda:
        measured["max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated()
        measured["max_memory_reserved_bytes"] = torch.cuda.max_memory_reserved()
        measured["nvidia_smi_bytes"] = process_memory_bytes()
    del model, optimizer, inputs
    if cuda:
        torch.cuda.empty_cache()
    return measured


def predict(case: Case, gpu: str) -> dict[str, Any]:
    from dlrig import fit

    options = fit.Options(
        model=case.preset,
        gpu=gpu,
        batch_size=case.batch_size,
        seq_len=case.seq_len,
        image_size=case.image_size,
        precision=case.precision,
        optimizer="adamw",
        lora=case.lora,
    )
    result = fit.estimate(options)
    return {
        "memory_peak_bytes": result.memory_peak_bytes,
        "memory_reserved_bytes": result.memory_reserved_bytes,
        "step_time_s": result.step_time_s,
    }


def error(predicted: float | None, measured: float | None) -> float | None:
    if not predicted or not measured:
        return None
    return (predicted - measured) / measured


def compare(case: Case, device: str, gpu: str) -> dict[str, Any]:
    measured = measure(case, device)
    predicted = predict(case, gpu)
    row: dict[str, Any] = {"case": asdict(case), "measured": measured, "predicted": predicted}
    # nvidia-smi's figure is what fit's peak means; without NVML, reserved is the nearest.
    smi = measured.get("nvidia_smi_bytes") or measured.get("max_memory_reserved_bytes")
    row["memory_error"] = error(predicted["memory_peak_bytes"], smi)
    row["time_error"] = error(predicted["step_time_s"], measured["step_time_s"])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("out/gpu-suite/fit_truth.json"))
    parser.add_argument("--gpu", default="h200-sxm-141gb", help="catalogue id of this GPU")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("skip=no-cuda")
        return
    rows = [compare(case, "cuda:0", args.gpu) for case in CASES]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    for row in rows:
        memory = row["memory_error"]
        timing = row["time_error"]
        print(
            f"{row['case']['name']:28} memory {'n/a' if memory is None else f'{memory:+.1%}':>7}"
            f"  time {'n/a' if timing is None else f'{timing:+.1%}':>7}"
        )
    memory_errors = [abs(r["memory_error"]) for r in rows if r["memory_error"] is not None]
    time_errors = [abs(r["time_error"]) for r in rows if r["time_error"] is not None]
    print(
        f"cases={len(rows)} memory_median_abs_error={statistics.median(memory_errors):.3f} "
        f"time_median_abs_error={statistics.median(time_errors):.3f}"
    )


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()

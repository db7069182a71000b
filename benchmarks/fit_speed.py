"""Wall time and peak memory of `dlrig fit` on this machine, against accelerate's estimator.

    python benchmarks/fit_speed.py

Targets (issue 11, 2-core machine): llama3-70b with FSDP traced in ≤ 30 s and ≤ 2 GB peak RSS;
llama3-8b at seq 8192 ≤ 60 s; a config estimate with --analytic in < 1 s, as instant as
`accelerate estimate-memory`. Issue 24: the largest-batch search must not multiply the trace
time, so a QLoRA estimate runs with and without it (`max_batch_search_ratio`); the same 8B
traced as torch.compile runs it (`--compile --fp8`) shows what the compile pass costs. accelerate's command checks the Hub first (no network here), so
the reference runs what that command runs after the check: an empty model from the same
config.json under `init_empty_weights` and `calculate_maximum_sizes`, in a fresh process.
Each command runs in its own process. The last line is the key=value summary.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tests" / "data" / "hf_configs" / "qwen2.5-7b-instruct.json"

LLAMA3_8B = [
    "llama3-8b",
    "--seq-len",
    "8192",
    "--batch-size",
    "1",
    "--grad-checkpointing",
    "--gpu",
    "h100-sxm5-80gb",
]
CASES = [
    (
        "llama3-70b-fsdp",
        [
            "llama3-70b",
            "--gpu",
            "a100-sxm4-80gb",
            "--gpus",
            "16",
            "--strategy",
            "fsdp",
            "--grad-checkpointing",
            "--seq-len",
            "2048",
        ],
        30.0,
        2.0,
    ),
    ("llama3-8b", LLAMA3_8B, 60.0, 3.0),
    ("llama3-8b-compile", [*LLAMA3_8B, "--compile", "--fp8"], 60.0, 3.0),
    ("resnet50", ["resnet50", "--gpu", "a100-sxm4-80gb"], 10.0, 3.0),
    (
        "qlora-8b",
        ["llama3-8b", "--qlora", "16", "--seq-len", "2048", "--gpu", "rtx-4090"],
        60.0,
        3.0,
    ),
    (
        "qlora-8b-no-search",
        ["llama3-8b", "--qlora", "16", "--seq-len", "2048", "--gpu", "rtx-4090", "--no-max-batch"],
        60.0,
        3.0,
    ),
    ("analytic-config", ["--config", str(CONFIG), "--analytic", "--gpu", "h100"], 1.0, 1.0),
]

# Runs the command and reports the child's own peak RSS (RUSAGE_CHILDREN of a fresh process).
_MEASURE = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"wall_s": time.perf_counter() - start, "rc": done.returncode,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "stderr": done.stderr[-300:]}))
"""

_ACCELERATE = """
import sys
from accelerate import init_empty_weights
from accelerate.utils import calculate_maximum_sizes
from transformers import AutoConfig, AutoModelForCausalLM

config = AutoConfig.from_pretrained(sys.argv[1])
with init_empty_weights():
    model = AutoModelForCausalLM.from_config(config)
total, largest = calculate_maximum_sizes(model)
print(total)
"""


def measure(command: list[str]) -> dict[str, float]:
    # A first estimate is what is timed: no traced step from the user's cache (dlrig.fit.cache).
    env = {**os.environ, "DLRIG_NO_CACHE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *command],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    figures: dict[str, float] = json.loads(done.stdout)
    return figures


def main() -> None:
    dlrig = shutil.which("dlrig", path=str(Path(sys.executable).parent)) or "dlrig"
    failed = False
    summary: dict[str, float] = {}
    for name, args, wall_limit, rss_limit_gb in CASES:
        figures = measure([dlrig, "fit", *args, "--json"])
        if figures["rc"] not in (0, 1):  # 1 = "does not fit": still a complete estimate
            sys.exit(f"{name}: dlrig fit failed: {figures['stderr']}")
        ok = figures["wall_s"] <= wall_limit and figures["peak_rss_mb"] / 1024 <= rss_limit_gb
        failed |= not ok
        summary[f"{name}_s"] = round(figures["wall_s"], 2)
        summary[f"{name}_rss_mb"] = round(figures["peak_rss_mb"])
        print(
            f"{name:16} wall {figures['wall_s']:6.2f} s (limit {wall_limit:g} s)  "
            f"peak RSS {figures['peak_rss_mb']:7.0f} MB (limit {rss_limit_gb:g} GB)  {'ok' if ok else 'OVER'}"
        )
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(CONFIG, Path(folder) / "config.json")
        reference = measure([sys.executable, "-c", _ACCELERATE, folder])
    if reference["rc"] != 0:
        sys.exit(f"accelerate reference failed: {reference['stderr']}")
    print(
        f"{'accelerate':16} wall {reference['wall_s']:6.2f} s (empty model + calculate_maximum_sizes)"
    )
    summary["max_batch_search_ratio"] = round(
        summary["qlora-8b_s"] / summary["qlora-8b-no-search_s"], 2
    )
    failed |= summary["max_batch_search_ratio"] > 1.5
    ratio = summary["analytic-config_s"] / reference["wall_s"]
    summary["accelerate_s"] = round(reference["wall_s"], 2)
    summary["analytic_over_accelerate"] = round(ratio, 3)
    print(" ".join(f"{k}={v}" for k, v in summary.items()))
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()

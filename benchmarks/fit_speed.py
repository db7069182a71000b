"""Wall time and peak memory of `dlrig fit` on this machine (targets from the fit issue).

    python benchmarks/fit_speed.py

Targets on a 2-core machine: llama3-8b at seq 8192 ≤ 60 s and ≤ 3 GB peak RSS; resnet50 ≤ 10 s.
Each command runs in its own process (with the largest-batch search, as users run it).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

CASES = [
    (
        "llama3-8b",
        [
            "llama3-8b",
            "--seq-len",
            "8192",
            "--batch-size",
            "1",
            "--precision",
            "amp-bf16",
            "--grad-checkpointing",
            "--gpu",
            "h100-sxm5-80gb",
        ],
        60.0,
        3.0,
    ),
    ("resnet50", ["resnet50", "--gpu", "a100-sxm4-80gb"], 10.0, 3.0),
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


def main() -> None:
    dlrig = shutil.which("dlrig", path=str(Path(sys.executable).parent)) or "dlrig"
    failed = False
    for name, args, wall_limit, rss_limit_gb in CASES:
        done = subprocess.run(
            [sys.executable, "-c", _MEASURE, dlrig, "fit", *args, "--json"],
            capture_output=True,
            text=True,
            check=True,
        )
        figures = json.loads(done.stdout)
        if figures["rc"] not in (0, 1):  # 1 = "does not fit": still a complete estimate
            sys.exit(f"{name}: dlrig fit failed: {figures['stderr']}")
        ok = figures["wall_s"] <= wall_limit and figures["peak_rss_mb"] / 1024 <= rss_limit_gb
        failed |= not ok
        print(
            f"{name:10} wall {figures['wall_s']:6.1f} s (limit {wall_limit:g} s)  "
            f"peak RSS {figures['peak_rss_mb']:7.0f} MB (limit {rss_limit_gb:g} GB)  {'ok' if ok else 'OVER'}"
        )
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()

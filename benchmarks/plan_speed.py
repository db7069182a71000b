"""Wall time of `dlrig plan` for three workloads over the whole GPU catalogue, against the naive
approach of one `fit.estimate` (a fresh trace) per workload, GPU and count.

    python benchmarks/plan_speed.py [--naive-pairs 6]

Target (issue 15, 2-core machine): ≤ 10 s for the plan, which traces each workload once and
evaluates the trace on every catalogue GPU at 1, 2, 4 and 8 GPUs (and every build and cloud
offer). The plan runs as the real console script in a fresh process (imports included). The
naive approach is timed on a sample of pairs in one process, with fit's trace cache cleared
before each pair so every pair traces, and extrapolated to the pairs the plan evaluates.
A plan asked again (the same workloads, another budget) reads its traces from the user's
cache (dlrig.fit.cache); that run is timed too, apart. The last line is the key=value summary.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
WORKLOADS = [
    "resnet50:epochs=90,dataset=1281167",
    "bert-large:seq=128,batch=32,tokens=3.3B",
    "gpt2:tokens=9B",
]
TARGET_S = 10.0


def run_plan(cache: Path) -> tuple[float, float, dict[str, object]]:
    """Wall seconds, CPU seconds (the process and its workers) and the document, with the
    trace cache (dlrig.fit.cache) in `cache`: an empty folder is a first run."""
    env = {**os.environ, "DLRIG_CACHE_DIR": str(cache)}
    env.pop("DLRIG_NO_CACHE", None)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "dlrig.cli.main", "plan", *WORKLOADS, "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
        env=env,
    )
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode not in (0, 1):
        raise SystemExit(f"dlrig plan failed: {done.stderr}")
    return elapsed, cpu, json.loads(done.stdout)


def naive_pairs(count: int) -> list[float]:
    """Seconds per (workload, GPU, count) pair when each pair traces afresh."""
    from dlrig.fit import tracing
    from dlrig.knowledge.gpus import catalogue
    from dlrig.plan.fitting import naive_estimate
    from dlrig.plan.workloads import parse

    workloads = [parse(text) for text in WORKLOADS]
    gpus = [catalogue().get(name) for name in ("a100-sxm4-80gb", "rtx-4090", "h100-sxm5-80gb")]
    pairs = [(w, g) for g in gpus for w in workloads][:count]
    naive_estimate(workloads[-1], gpus[0], 1)  # imports (torch, transformers) are not a pair's cost
    seconds = []
    for workload, spec in pairs:
        assert spec is not None
        # The benchmark's reference is "no trace reuse": empty fit's in-process trace cache.
        tracing._CACHE.clear()
        start = time.perf_counter()
        naive_estimate(workload, spec, 1)
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--naive-pairs", type=int, default=6, help="pairs timed for the naive approach"
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="plan runs (the fastest counts: other load only slows a run)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlrig-plan-bench-") as folder:
        # First runs: each with an empty trace cache. Then a run asked again (another budget,
        # another constraint): the cache the last first run filled.
        runs = [run_plan(Path(folder) / f"cold{i}") for i in range(max(1, args.runs))]
        again = run_plan(Path(folder) / f"cold{len(runs) - 1}")
    plan_s = min(r[0] for r in runs)
    cpu_s = min(r[1] for r in runs)
    document = runs[0][2]
    load = os.getloadavg()[0]
    pairs = len(document["catalogue"]) * len(WORKLOADS)  # type: ignore[arg-type]
    per_pair = naive_pairs(args.naive_pairs)
    naive_s = statistics.median(per_pair) * pairs
    options = len(document["options"])  # type: ignore[arg-type]
    walls = ", ".join(f"{r[0]:.1f}" for r in runs)
    print(
        f"dlrig plan, {len(WORKLOADS)} workloads: fastest of {len(runs)} first runs {plan_s:.1f} s wall ({walls}), {cpu_s:.1f} s CPU (workers included), load average {load:.1f} on {os.cpu_count()} CPUs; {document['traces']} traces, {options} options, {pairs} workload x GPU x count pairs of the catalogue"
    )
    print(f"asked again (traces from the user's cache): {again[0]:.1f} s wall")
    print(
        f"naive: {statistics.median(per_pair):.2f} s per pair (median of {len(per_pair)} pairs, each a fresh trace) x {pairs} pairs = {naive_s:.0f} s (extrapolated)"
    )
    print(
        f"plan_s={plan_s:.2f} plan_again_s={again[0]:.2f} plan_cpu_s={cpu_s:.2f} load={load:.1f} naive_s={naive_s:.1f} ratio={plan_s / naive_s:.4f} "
        f"speedup={naive_s / plan_s:.0f} traces={document['traces']} pairs={pairs} "
        f"target_s={TARGET_S:g} met={plan_s <= TARGET_S}"
    )


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()

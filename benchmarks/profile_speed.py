"""How fast `dlrig profile` reads a trace, and what it costs a training loop.

1. The largest recorded trace (tests/corpus/kineto, by uncompressed size) analysed by dlrig and
   by Holistic Trace Analysis 0.5.0 (temporal breakdown and kernel table), each in a fresh
   process, alternating; each process times its own load + analysis (imports excluded: HTA's
   take ~0.5 s more) and reports its peak RSS. Targets: dlrig ≥ 5x faster, RSS ≤ 1/3 of HTA's.
2. A CPU training loop (benchmarks/data/profile_loop.py) run plainly and under
   `dlrig profile`; the mean step time of the steps after the profiled window, both ways.
   Target: ≤ 5 % slower under dlrig.

    python benchmarks/profile_speed.py [--runs 5]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hta_env

KINETO = hta_env.ROOT / "tests" / "corpus" / "kineto"
LOOP = Path(__file__).resolve().parent / "data" / "profile_loop.py"
DLRIG_RUNNER = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from dlrig import profile
t1 = time.perf_counter()
report = profile.analyse([sys.argv[1]])
report.to_dict()
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "analyse_s": t2 - t1,
                  "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""
LOOP_STEPS = 80
AFTER_WINDOW = 20  # steps from here on are past the profiled window (it ends at step 8)


def largest() -> Path:
    def size(path: Path) -> int:
        with gzip.open(path) as stream:
            return sum(len(block) for block in iter(lambda: stream.read(1 << 20), b""))

    return max(KINETO.glob("*.json.gz"), key=size)


def dlrig_run(path: Path) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", DLRIG_RUNNER, str(path)], capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def loop(profiled: bool) -> float:
    with tempfile.TemporaryDirectory() as folder:
        times = Path(folder) / "times.json"
        env = dict(os.environ, PROFILE_LOOP_TIMES=str(times))
        command = [sys.executable, str(LOOP), str(LOOP_STEPS)]
        if profiled:
            dlrig = shutil.which("dlrig", path=str(Path(sys.executable).parent)) or "dlrig"
            command = [dlrig, "profile", "--json", "--", *command]
        subprocess.run(command, env=env, capture_output=True, check=True)
        values = json.loads(times.read_text())
    return statistics.fmean(values[AFTER_WINDOW:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    hta_env.ensure()
    path = largest()
    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(path, Path(folder) / path.name)
        ours: list[dict[str, float]] = []
        theirs: list[dict[str, float]] = []
        for run in range(args.runs):
            pair = [
                lambda: ours.append(dlrig_run(path)),
                lambda: theirs.append(hta_env.run(Path(folder))),
            ]  # type: ignore[arg-type]
            for call in pair if run % 2 == 0 else reversed(pair):
                call()
    dlrig_s = statistics.median(r["analyse_s"] for r in ours)
    hta_s = statistics.median(float(r["analyse_s"]) for r in theirs)
    dlrig_mb = max(r["max_rss_mb"] for r in ours)
    hta_mb = min(float(r["max_rss_mb"]) for r in theirs)
    print(f"trace: {path.name}")
    print("dlrig load+analyse s: " + " ".join(f"{r['analyse_s']:.3f}" for r in ours))
    print("HTA   load+analyse s: " + " ".join(f"{float(r['analyse_s']):.3f}" for r in theirs))
    print(f"peak RSS MB: dlrig {dlrig_mb:.0f} (max of runs), HTA {hta_mb:.0f} (min of runs)")
    plain: list[float] = []
    profiled: list[float] = []
    for run in range(args.runs):
        for flag in (False, True) if run % 2 == 0 else (True, False):
            (profiled if flag else plain).append(loop(flag))
    plain_ms = statistics.median(plain) * 1000
    profiled_ms = statistics.median(profiled) * 1000
    overhead = profiled_ms / plain_ms - 1
    print("loop step ms, plain:    " + " ".join(f"{v * 1000:.2f}" for v in plain))
    print("loop step ms, profiled: " + " ".join(f"{v * 1000:.2f}" for v in profiled))
    speedup = hta_s / dlrig_s
    rss_ratio = dlrig_mb / hta_mb
    print(
        f"trace_mb_gz={path.stat().st_size / 1e6:.1f} dlrig_s={dlrig_s:.3f} hta_s={hta_s:.3f} "
        f"speedup={speedup:.2f} dlrig_rss_mb={dlrig_mb:.0f} hta_rss_mb={hta_mb:.0f} "
        f"rss_ratio={rss_ratio:.2f} loop_overhead_pct={100 * overhead:.2f} "
        f"ok={speedup >= 5 and rss_ratio <= 1 / 3 and overhead <= 0.05}"
    )


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()

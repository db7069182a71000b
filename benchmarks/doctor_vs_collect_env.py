"""Time `dlrig doctor` against `python -m torch.utils.collect_env` on this machine.

Both run as fresh processes, alternating, several times; the script prints each run, the
medians and the ratio (target: dlrig ≤ 0.5 × collect_env while checking far more).

    python benchmarks/doctor_vs_collect_env.py [--runs 9]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):  # doctor exits 1 when a check fails: still a full run
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-400:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    python = sys.executable
    dlrig = shutil.which("dlrig", path=str(Path(python).parent)) or "dlrig"
    commands = {
        "dlrig doctor": [dlrig, "doctor", "--json"],
        "collect_env": [python, "-m", "torch.utils.collect_env"],
    }
    for argv in commands.values():  # warm the page cache for both before timing
        timed(argv)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for run in range(args.runs):
        order = list(commands) if run % 2 == 0 else list(reversed(commands))
        for name in order:
            times[name].append(timed(commands[name]))
    for name, values in times.items():
        print(f"{name:14} runs: " + " ".join(f"{v:.3f}" for v in values))
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"{name:14} median: {value:.3f} s")
    ratio = medians["dlrig doctor"] / medians["collect_env"]
    from dlrig import doctor

    print(
        f"checks: dlrig doctor runs {len(doctor.all_checks())} checks; collect_env prints facts only"
    )
    print(f"ratio dlrig/collect_env: {ratio:.2f} (target ≤ 0.50)")


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()

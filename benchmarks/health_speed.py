"""How long one `dlrig health` takes on this machine, against `dlrig doctor` (the full check) in
the same run: wall and CPU seconds of the whole process, Python's start-up included, as Slurm's
HealthCheckProgram or node-problem-detector pays them.

    python benchmarks/health_speed.py [--runs 7]

Targets (issue 26): a periodic check <= 2 s wall and <= 1 s CPU. The last line is a key=value
summary.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent


def _timed(argv: list[str]) -> tuple[float, float, int]:
    before = os.times()
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    wall = time.perf_counter() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (
        after.children_system - before.children_system
    )
    return wall, cpu, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    dlrig = [sys.executable, "-m", "dlrig.cli.main"]
    health: list[tuple[float, float]] = []
    doctor: list[tuple[float, float]] = []
    for _ in range(args.runs):
        wall, cpu, code = _timed([*dlrig, "health", "--json"])
        if code not in (0, 1, 3):
            sys.exit(f"dlrig health exited {code}")
        health.append((wall, cpu))
        wall, cpu, _ = _timed([*dlrig, "doctor", "--json"])
        doctor.append((wall, cpu))
    health_wall = statistics.median(w for w, _ in health)
    health_cpu = statistics.median(c for _, c in health)
    doctor_wall = statistics.median(w for w, _ in doctor)
    doctor_cpu = statistics.median(c for _, c in doctor)
    print(
        f"dlrig health (periodic): median {health_wall:.2f} s wall, {health_cpu:.2f} s CPU "
        f"over {args.runs} runs (worst {max(w for w, _ in health):.2f} s wall)"
    )
    print(f"dlrig doctor (reference): median {doctor_wall:.2f} s wall, {doctor_cpu:.2f} s CPU")
    print(f"health/doctor wall: {health_wall / doctor_wall:.2f} (targets: <= 2 s wall, <= 1 s CPU)")
    print(
        f"health_wall_s={health_wall:.2f} health_cpu_s={health_cpu:.2f} "
        f"doctor_wall_s={doctor_wall:.2f} doctor_cpu_s={doctor_cpu:.2f} "
        f"ratio={health_wall / doctor_wall:.2f} runs={args.runs} "
        f"wall_ok={health_wall <= 2.0} cpu_ok={health_cpu <= 1.0}"
    )


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()

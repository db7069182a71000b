"""Does "quick" keep its word? `dlrig bench --quick` (all parts) and
`dlrig accept --level quick --minutes 1`, timed whole (start-up included) against their budgets:
60 s and 3 min on any machine (issue 30).

Each runs twice: on this CPU as it is, and with oneDNN held to AVX2
(`ONEDNN_MAX_CPU_ISA=AVX2`), which takes away native bf16 (AVX512-BF16/AMX) the way a CPU
without it lacks it: a bf16 matmul is then emulated, 100x and more slower per FLOP, the case where
the old `--quick` ran for minutes. Storage and pack measure a scratch folder.

    python benchmarks/quick_budget.py [--skip-accept]

The last line is a key=value summary; ratio = seconds / budget (<= 1 keeps the promise).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
BENCH_BUDGET_S = 60.0
ACCEPT_BUDGET_S = 180.0
CPUS = {"native": {}, "no-native-bf16": {"ONEDNN_MAX_CPU_ISA": "AVX2"}}


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    started = time.perf_counter()
    done = subprocess.run(
        argv, capture_output=True, text=True, cwd=ROOT, env={**os.environ, **env}, check=False
    )
    return time.perf_counter() - started, done.returncode, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-accept", action="store_true", help="time bench --quick only")
    args = parser.parse_args()
    dlrig = [sys.executable, "-m", "dlrig.cli.main"]
    summary: dict[str, str] = {}
    worst = 0.0
    for cpu, env in CPUS.items():
        with tempfile.TemporaryDirectory(prefix="dlrig-quick-") as scratch:
            seconds, code, out = _timed([*dlrig, "bench", "--quick", "--path", scratch], env)
            if code not in (0, 1):
                sys.exit(f"bench --quick ({cpu}) exited {code}:\n{out[-2000:]}")
            notes = [line for line in out.splitlines() if "left out" in line or "emulated" in line]
            print(f"bench --quick, all parts, {cpu}: {seconds:.1f} s (budget {BENCH_BUDGET_S:g} s)")
            for line in notes:
                print(f"  {line.strip()[:200]}")
            summary[f"bench_{cpu}_s"] = f"{seconds:.1f}"
            worst = max(worst, seconds / BENCH_BUDGET_S)
        if args.skip_accept:
            continue
        with tempfile.TemporaryDirectory(prefix="dlrig-accept-") as scratch:
            argv = [*dlrig, "accept", "--level", "quick", "--minutes", "1"]
            argv += ["--path", scratch, "--out", str(Path(scratch) / "out")]
            seconds, code, out = _timed(argv, env)
            if code not in (0, 1):
                sys.exit(f"accept --level quick ({cpu}) exited {code}:\n{out[-2000:]}")
            print(
                f"accept --level quick --minutes 1, {cpu}: {seconds:.1f} s "
                f"(budget {ACCEPT_BUDGET_S:g} s)"
            )
            summary[f"accept_{cpu}_s"] = f"{seconds:.1f}"
            worst = max(worst, seconds / ACCEPT_BUDGET_S)
    summary["worst_ratio_to_budget"] = f"{worst:.2f}"
    summary["met"] = str(worst <= 1.0).lower()
    print(" ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    import results

    with results.record(__file__):
        main()

"""How long `dlrig --help`, each command's `--help` and a few quick commands take to start, for
two checkouts in one run (alternating, best of N each), so a change to what the CLI imports is
measured rather than guessed.

    git worktree add /tmp/before <commit>
    python benchmarks/cli_startup.py --before /tmp/before/src [--after src] [--runs 7]

Each checkout runs as `python -m dlrig` with PYTHONPATH set to its `src`, in this interpreter.
The last line is a key=value summary (totals over the commands, after/before ratio).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = (
    "--help",
    "doctor --help",
    "diagnose --help",
    "fit --help",
    "monitor --help",
    "bench --help",
    "provision --help",
    "provision docker --help",
    "pack --help",
    "plan --help",
    "plan cost --help",
    "accept --help",
    "report --help",
    "health --help",
    "profile --help",
    "doctor --list-checks",
)


def _seconds(src: str, args: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=src)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "dlrig", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the other checkout's src folder")
    parser.add_argument("--after", default=str(ROOT / "src"), help="default: this checkout")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    totals = [0.0, 0.0]
    slowest = 0.0
    print(f"{'command':28} {'before_s':>9} {'after_s':>9}")
    for command in COMMANDS:
        best = [float("inf"), float("inf")]
        for _ in range(args.runs):
            for i, src in enumerate((args.before, args.after)):  # alternate: same load on both
                best[i] = min(best[i], _seconds(src, command.split()))
        totals = [totals[0] + best[0], totals[1] + best[1]]
        slowest = max(slowest, best[1])
        print(f"{command:28} {best[0]:9.3f} {best[1]:9.3f}")
    print(
        f"commands={len(COMMANDS)} runs={args.runs} before_total_s={totals[0]:.3f} "
        f"after_total_s={totals[1]:.3f} ratio={totals[1] / totals[0]:.3f} "
        f"slowest_after_s={slowest:.3f}"
    )


if __name__ == "__main__":
    main()

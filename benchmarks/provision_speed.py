"""Time `dlrig provision TARGET` for every target as a fresh process (the user's wall time),
against the start-up of the same interpreter doing nothing (`python -c pass`) as the reference.

Target: every target under 1 s. Stated facts, no live probe and no --lock (which waits on the
package index), so the figure is dlrig's own work: imports, tables, templates, writing files.

    python benchmarks/provision_speed.py [--runs 7]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

FACTS = ["--gpu", "h100-sxm5-80gb", "--gpus", "8", "--os", "ubuntu-24.04", "--torch", "2.9"]
TARGETS = {
    "host": ["host", *FACTS, "--cuda", "12.8", "--cudnn", "--nccl"],
    "env": ["env", *FACTS, "--with", "numpy"],
    "docker": ["docker", *FACTS],
    "nccl": ["nccl", *FACTS, "--socket-ifname", "=ens1f0"],
    "launch-slurm": ["launch", "train.py", "--scheduler", "slurm", "--nodes", "4", *FACTS],
    "launch-kubeflow": ["launch", "train.py", "--scheduler", "kubeflow", "--nodes", "4", *FACTS],
    "power": ["power", *FACTS, "--power-limit", "500", "--node", "gpu01"],
    "monitor-k8s": ["monitor-k8s", *FACTS],
}


def timed(argv: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-400:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    python = sys.executable
    dlrig = shutil.which("dlrig", path=str(Path(python).parent)) or "dlrig"
    with tempfile.TemporaryDirectory(prefix="dlrig-bench-") as folder:
        commands = {"python -c pass": [python, "-c", "pass"]}
        for name, words in TARGETS.items():
            commands[name] = [
                dlrig,
                "provision",
                *words,
                "--out",
                str(Path(folder) / name),
                "--overwrite",
            ]
        for argv in commands.values():  # warm the page cache
            timed(argv)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for run in range(args.runs):
            order = list(commands) if run % 2 == 0 else list(reversed(commands))
            for name in order:
                times[name].append(timed(commands[name]))
    medians = {name: statistics.median(values) for name, values in times.items()}
    reference = medians.pop("python -c pass")
    print(f"{'python -c pass':16} median {reference:.3f} s")
    for name, value in medians.items():
        print(f"{name:16} median {value:.3f} s  ({value / reference:.1f}x python start-up)")
    slowest = max(medians, key=lambda n: medians[n])
    verdict = "pass" if medians[slowest] < 1.0 else "FAIL"
    print(
        f"slowest={slowest} slowest_s={medians[slowest]:.3f} reference_s={reference:.3f} "
        f"ratio={medians[slowest] / reference:.2f} target_s=1.0 verdict={verdict}"
    )


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()

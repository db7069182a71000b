"""`dlrig bench dataloader`'s search against the full grid of DataLoader settings, in one run.

Runs the search, then every combination of num_workers × prefetch_factor × persistent_workers
(× pin_memory with a GPU) on the same dataset with the same trial length, and prints:
- the grid's best settings and throughput;
- the settings the search chose, and their throughput as the grid measured them (so both
  figures come from the same measurement conditions), as a fraction of the grid's best;
- the time each took, and the ratio.

    python benchmarks/dataloader_search.py [--dataset module:factory] [--batch-size 64]

Targets: chosen settings >= 90% of the grid's best, in <= 1/3 of the grid's time.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from dlrig.bench import dataloader  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dataset", help="module:factory (default: synthetic JPEG images)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--trial-seconds", type=float, default=1.5)
    args = parser.parse_args()
    dataset = (
        dataloader.load_dataset(args.dataset) if args.dataset else dataloader.SyntheticImages()
    )
    runner = dataloader.TrialRunner(dataset, args.batch_size, trial_seconds=args.trial_seconds)
    cores = len(os.sched_getaffinity(0))
    found = dataloader.search(runner, cores, cuda=False)
    full = dataloader.grid(runner, cores, cuda=False)
    chosen_in_grid = full.throughput_of(found.best.settings)
    if chosen_in_grid is None:  # the search tried a worker count the grid does not have
        chosen_in_grid = runner.run(found.best.settings).samples_per_s
    share = chosen_in_grid / full.best.samples_per_s
    time_ratio = found.seconds / full.seconds
    print(
        f"dataset: {args.dataset or 'synthetic JPEG images'}; batch {args.batch_size}; {cores} cores"
    )
    print(
        f"grid:   {len(full.trials):3d} trials in {full.seconds:6.1f} s; best "
        f"{full.best.settings.label()} at {full.best.samples_per_s:.0f} samples/s"
    )
    print(
        f"search: {len(found.trials):3d} trials in {found.seconds:6.1f} s; chose "
        f"{found.best.settings.label()} ({found.best.samples_per_s:.0f} samples/s in the search, "
        f"{chosen_in_grid:.0f} in the grid)"
    )
    print(f"chosen settings reach {share:.0%} of the grid's best, in {time_ratio:.2f} of its time")
    ok = share >= 0.9 and time_ratio <= 1 / 3
    print(f"targets (>= 90% of best, <= 1/3 of the time): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()

"""`dlrig bench storage` against fio on the same file and the same pattern, in one run.

Writes one test file, then alternates dlrig's reader and fio (psync, iodepth 1, O_DIRECT where
the filesystem allows) for the sequential (1 MiB) and random (128 KiB) patterns, `--rounds`
times each with the order flipped every round (a VM's host cache warms as the file is read), and
prints both medians and their ratio.

    python benchmarks/storage_vs_fio.py [--dir /data] [--size 1G] [--rounds 5] [--seconds 3]

Target: every ratio within 0.8-1.2.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from dlrig.bench import reads, storage  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--size", default="1G")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument(
        "--no-hugepages", action="store_true", help="do not reserve huge pages for fio"
    )
    args = parser.parse_args()
    if shutil.which("fio") is None:
        sys.exit("fio is not installed (apt-get install fio)")
    size = storage.parse_size(args.size)
    # dlrig reads into a transparent huge page; fio can only get one through hugetlbfs
    # (--mem=shmhuge). As root, reserve a few for the run and give them back afterwards.
    reserved = None
    if reads.huge_pages_free() < 2 and os.geteuid() == 0 and not args.no_hugepages:
        knob = Path("/proc/sys/vm/nr_hugepages")
        reserved = knob.read_text().strip()
        knob.write_text(str(int(reserved) + 8))
    try:
        figures = _measure(args, size)
    finally:
        if reserved is not None:
            Path("/proc/sys/vm/nr_hugepages").write_text(reserved)
    fio_memory = (
        "huge pages (--mem=shmhuge)"
        if reserved is not None or reads.huge_pages_free() >= 2
        else "ordinary pages"
    )
    _report(args, size, figures, fio_memory)


def _measure(args: argparse.Namespace, size: int) -> dict[tuple[str, str], list[float]]:
    figures: dict[tuple[str, str], list[float]] = {}
    with storage.test_file(Path(args.dir), size, lambda label, fraction: None) as path:
        direct = reads.cache_mode(path) == "O_DIRECT"
        for round_number in range(args.rounds):
            for pattern in ("seq", "random"):
                order = ("dlrig", "fio") if round_number % 2 == 0 else ("fio", "dlrig")
                for tool in order:
                    if tool == "dlrig":
                        if pattern == "seq":
                            result, _ = reads.sequential_read(path)
                        else:
                            result, _ = reads.random_read(path, seconds=args.seconds)
                    else:
                        block = reads.SEQ_BLOCK if pattern == "seq" else reads.RANDOM_BLOCK
                        found = storage.fio(
                            path,
                            pattern,
                            block,
                            direct=direct,
                            seconds=None if pattern == "seq" else args.seconds,
                        )
                        if found is None:
                            sys.exit("fio failed to run")
                        result = found
                    figures.setdefault((pattern, tool), []).append(result.mb_per_s)
    return figures


def _report(
    args: argparse.Namespace,
    size: int,
    figures: dict[tuple[str, str], list[float]],
    fio_memory: str,
) -> None:
    print(
        f"file: {size / 1e9:.1f} GB in {args.dir}, {args.rounds} alternating rounds; "
        f"dlrig reads into a transparent huge page, fio into {fio_memory}"
    )
    worst = 0.0
    for pattern, label in (("seq", "seq_read 1 MiB"), ("random", "random_read 128 KiB")):
        ours = statistics.median(figures[(pattern, "dlrig")])
        theirs = statistics.median(figures[(pattern, "fio")])
        ratio = ours / theirs
        worst = max(worst, abs(ratio - 1))
        print(
            f"{label:22s} dlrig {ours:8.1f} MB/s   fio {theirs:8.1f} MB/s   ratio {ratio:.2f}   "
            f"(dlrig runs: {', '.join(f'{v:.0f}' for v in figures[(pattern, 'dlrig')])}; "
            f"fio runs: {', '.join(f'{v:.0f}' for v in figures[(pattern, 'fio')])})"
        )
    print(f"target: within ±20% of fio: {'met' if worst <= 0.2 else 'NOT met'}")


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()

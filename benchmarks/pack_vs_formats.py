"""dlrig pack against the formats users pick: LMDB, HDF5, WebDataset, LitData and MDS, and the
loose files themselves, on one synthetic ImageNet-like set of real JPEGs.

    .venv/bin/python benchmarks/pack_vs_formats.py [--samples 20000] [--trials 3]

1. makes N real JPEGs with Pillow (varied sizes, 100 class folders);
2. packs them with each library's own writer, one fresh process per format, timed to sync;
3. reads each back through a torch DataLoader in its own process per trial, interleaved by
   case, raw (every page touched) and decoded, page-cold / fully cold (drop_caches, when
   root) / warm, every state checked with mincore, sequential and shuffled, 1 process and N
   workers; each format through its documented reader, and dlrig and LMDB also through their
   zero-copy APIs;
4. prints the tables (medians), the targets, the load average, and a key=value last line.

LitData and WebDataset are installed from PyPI into one benchmark virtual environment, MDS
(mosaicml-streaming) into its own (it pins numpy < 2.2 and imports torchvision); torch there
is the same CPU wheel as the dev venv. The parts are in benchmarks/pack_bench/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from pack_bench import child, readers, report, runner, writers

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=" ".join((__doc__ or "").split("\n\n")[0].split()))
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--decode-samples", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dlrig-pack-bench"))
    parser.add_argument("--formats", default=",".join(r.name for r in readers.ROWS))
    parser.add_argument("--no-full-cold", action="store_true",
                        help="skip the drop_caches case (it slows every program on the machine)")  # fmt: skip
    parser.add_argument("--report", type=Path, help="print the report of a saved results.json")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--pack", help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = args.workdir / f"n{args.samples}"
    if args.serve:
        return child.serve(args.serve, work)
    if args.pack:
        return print(json.dumps({"seconds": writers.pack_format(args.pack, work)}))
    if args.report:
        return report.print_report(json.loads(args.report.read_text()))
    unknown = set(args.formats.split(",")) - set(readers.BY_NAME)
    if unknown:
        raise SystemExit(f"--formats: unknown {', '.join(sorted(unknown))}; known: "
                         + ", ".join(readers.BY_NAME))  # fmt: skip
    runner.run(args)


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        sys.exit(main())

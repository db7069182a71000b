"""The parent: makes the set, packs every format, then runs the trials and hands the figures
to the report.

Trials are interleaved by case: for each case (stage, cache, order, processes) every format
runs once, in an order rotated per case and trial, each from the same cache state, set and
checked just before it; so a burst of load from the other users of a shared machine falls on
formats alike rather than on whichever ran during it. Each format has its own reading process
per trial (restarted when it keeps its files mapped, so a cold cache can be made cold).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pack_bench import cache, jpegs, readers, report, writers

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "pack_vs_formats.py"
PACKAGES = {"anchors": ["litdata", "webdataset"], "mds": ["mosaicml-streaming"]}
VENV_OF_STORE = {"webdataset": "anchors", "litdata": "anchors", "mds": "mds"}


def venv_python(name: str, base: Path) -> str:
    """A benchmark virtual environment with the same torch as the dev venv plus the library."""
    import torch

    venv = base / f"venv-{name}"
    python = venv / "bin" / "python"
    stamp = venv / ".dlrig-bench-ready"
    if not stamp.exists():
        subprocess.run(
            [getattr(sys, "_base_executable", "python3"), "-m", "venv", str(venv)], check=True
        )
        torch_spec = f"torch=={torch.__version__.split('+')[0]}"
        env = dict(os.environ)
        if name == "mds":
            # PyPI's torchvision (which MDS imports) only loads with PyPI's own torch build,
            # not with a local CPU wheel a find-links folder may offer.
            env.pop("PIP_FIND_LINKS", None)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", torch_spec, "pillow", *PACKAGES[name]],
            check=True,
            env=env,
        )
        stamp.write_text("ok")
    return str(python)


def _python(venv: str | None, base: Path) -> str:
    return venv_python(venv, base) if venv else sys.executable


def _spawn(python: str, work: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONWARNINGS="ignore")
    return subprocess.Popen(
        [python, str(SCRIPT), "--workdir", str(work.parent), "--samples", work.name[1:], *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip


class Child:
    """A reading process for one row."""

    def __init__(self, row: readers.Row, work: Path) -> None:
        self.row, self.work = row, work
        self.process = self._start()

    def _start(self) -> subprocess.Popen[str]:
        process = _spawn(
            _python(self.row.venv, self.work.parent), self.work, "--serve", self.row.name
        )
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())
        assert ready["ready"] == self.row.name, ready
        return process

    def ask(self, case: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps(case) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())  # type: ignore[no-any-return]

    def restart(self) -> None:
        self.close()
        self.process = self._start()

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def key(case: dict[str, Any]) -> str:
    return f"{case['stage']}/{case['cache']}/{case['order']}/{case['workers']}"


def make_cases(samples: int, decode_samples: int, workers: int, full: bool) -> list[dict[str, Any]]:
    colds = ["cold", "cold-full"] if full else ["cold"]
    caches = {"raw": [*colds, "warm"], "decode": ["cold", "warm"]}
    cases = [
        {"stage": stage, "cache": c, "order": order, "workers": w,
         "count": samples if stage == "raw" else min(decode_samples, samples)}
        for stage in ("raw", "decode")
        for c in caches[stage]
        for order in ("sequential", "shuffled")
        for w in (1, workers)
    ]  # fmt: skip
    # Map-style readers only: a random twentieth of the samples, cold, one process.
    return cases + [
        {"stage": "raw", "cache": c, "order": "subset", "workers": 1,
         "count": max(1, samples // readers.SUBSET)}
        for c in colds
    ]  # fmt: skip


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def pack_all(work: Path, stores: list[str]) -> tuple[dict[str, float], dict[str, int]]:
    """Every store packed in a fresh process, from a page-cold source; dlrig first (the others
    store its order)."""
    from dlrig.bench.pack_cache import set_cache

    seconds: dict[str, float] = {}
    sizes: dict[str, int] = {"loose": disk_bytes(work / "src")}
    sources = [str(p) for p in jpegs.jpeg_paths(work / "src")]
    for store in ["dlrig"] + [s for s in stores if s != "dlrig"]:
        set_cache(sources, "cold")  # each writer reads the source from disk, as in real use
        child = _spawn(_python(VENV_OF_STORE.get(store), work.parent), work, "--pack", store)
        out, _ = child.communicate(timeout=3600)
        if child.returncode != 0:
            raise SystemExit(f"packing {store} failed")
        seconds[store] = json.loads(out.strip().splitlines()[-1])["seconds"]
        sizes[store] = disk_bytes(work / "formats" / store)
        print(
            f"packed {store}: {seconds[store]:.1f} s, {sizes[store] / 1e6:.0f} MB on disk",
            flush=True,
        )
        if store == "dlrig":
            writers.write_order(work)
    return seconds, sizes


def _measure(child: Child, case: dict[str, Any], trial: Any) -> tuple[dict[str, Any], float]:
    files = cache.data_files(child.row, child.work)
    resident = cache.set_cache(files, case["cache"])
    if case["cache"] != "warm" and resident > 0.01:
        # The reader still maps its files (LitData keeps its chunks mapped after the dataset
        # is gone): a fresh reader process lets the pages go.
        child.restart()
        resident = cache.set_cache(files, case["cache"])
    return child.ask(case), resident


def importable(rows: list[readers.Row], base: Path) -> list[readers.Row]:
    """The rows whose library imports in its benchmark venv. One that does not (MDS imports
    torchvision, whose PyPI wheel loads only with PyPI's own torch build, which a machine with
    only a local CPU wheel cannot install) is said and left out, not a failed run."""
    kept = []
    for row in rows:
        library = writers.LIBRARY.get(row.store or "")
        if row.venv is None or library is None:
            kept.append(row)
            continue
        done = subprocess.run(
            [venv_python(row.venv, base), "-c", f"import {library}"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            kept.append(row)
        else:
            reason = (done.stderr.strip().splitlines() or ["import failed"])[-1]
            print(f"{row.name} not measured: `import {library}` fails in its venv: {reason}")
    return kept


def run(args: Any) -> None:
    base: Path = args.workdir
    work = base / f"n{args.samples}"
    rows = importable([r for r in readers.ROWS if r.name in args.formats.split(",")], base)
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    jpegs.make_dataset(work / "src", args.samples, os.cpu_count() or 1)
    raw_bytes = sum(p.stat().st_size for p in jpegs.jpeg_paths(work / "src"))
    print(f"dataset: {args.samples} JPEGs, {raw_bytes / 1e6:.0f} MB "
          f"({time.perf_counter() - started:.0f} s to make)", flush=True)  # fmt: skip
    stores = list(dict.fromkeys(r.store for r in rows if r.store))
    pack_seconds, sizes = pack_all(work, stores)
    if "webdataset" in stores:
        print(writers.check_webdataset_readback(work, venv_python("anchors", base)), flush=True)
    refusal = None if args.no_full_cold else cache.full_cold_refusal()
    if refusal:
        print(f"fully cold not measured: {refusal}; the 5x target is judged on page-level cold")
    cases = make_cases(
        args.samples, args.decode_samples, args.workers, not (args.no_full_cold or refusal)
    )
    runs: list[dict[str, Any]] = []
    loads: list[tuple[float, float, float]] = [cache.load_average()]
    for trial in range(args.trials):
        began = time.perf_counter()
        children = {row.name: Child(row, work) for row in rows}
        try:
            for number, case in enumerate(cases):
                todo = [r for r in rows if not (r.raw_only and case["stage"] != "raw")]
                if case["order"] == "subset":
                    todo = [r for r in todo if r.style == "map"]
                turn = (trial + number) % len(todo)
                for row in todo[turn:] + todo[:turn]:
                    result, resident = _measure(children[row.name], case, trial)
                    entry = {"trial": trial, "row": row.name, "key": key(case), **case,
                             "resident": resident, "load1": os.getloadavg()[0], **result}  # fmt: skip
                    if case["cache"] == "cold-full":
                        entry["dentries_after_drop"] = cache.dentries()
                    runs.append(entry)
                    report.progress_line(entry, raw_bytes, args.samples)
        finally:
            for child in children.values():
                child.close()
        loads.append(cache.load_average())
        print(f"trial {trial + 1}/{args.trials} done in {time.perf_counter() - began:.0f} s, "
              f"load average {loads[-1][0]:.2f} {loads[-1][1]:.2f} {loads[-1][2]:.2f}", flush=True)  # fmt: skip
    document = {
        "samples": args.samples, "raw_bytes": raw_bytes, "trials": args.trials,
        "workers": args.workers, "decode_samples": args.decode_samples,
        "rows": [r.__dict__ for r in rows], "pack_seconds": pack_seconds, "sizes": sizes,
        "full_cold_refusal": refusal, "loads": loads, "runs": runs, "cpus": os.cpu_count(),
    }  # fmt: skip
    (work / "results.json").write_text(json.dumps(document, indent=1))
    report.print_report(document)

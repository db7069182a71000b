"""dlrig pack against the formats users pick: LMDB, HDF5, WebDataset, LitData and MDS, and the
loose files themselves, on one synthetic ImageNet-like set of real JPEGs.

    .venv/bin/python benchmarks/pack_vs_formats.py [--samples 20000] [--trials 3]

What it does:
1. makes N real JPEGs with Pillow (varied sizes, 160-500 px a side, quality 70-95, smooth
   colour fields with grain), 100 class folders;
2. packs them with each library's own writer, in one fresh process per format, and times it
   up to `os.sync()` (so every format pays for getting its bytes to disk; dlrig and LMDB also
   fsync on their own). All formats hold the same samples in the same order (dlrig's);
3. reads each back in a fresh process per format and trial (trials interleaved ABCABC), for
   raw bytes and bytes + JPEG decode (Pillow, the same function for all), with a cold page
   cache (posix_fadvise DONTNEED, then mincore: ≤ 1% resident, checked) and a warm one
   (≥ 99% resident, checked), sequential and shuffled, in 1 process and in N DataLoader
   workers (whose collate returns counts only, so IPC is not measured);
4. prints the table (medians), whether dlrig met its targets, and a key=value last line.

Each library gets its documented reader: LMDB `readonly, lock=False` (readahead on for
sequential, off for shuffled), HDF5 one uint8 blob + offsets (the slice-friendly layout) and
the common vlen layout, WebDataset's `WebDataset` with `shardshuffle` + `.shuffle(1000)`,
LitData's and MDS's `StreamingDataset` iteration with their own shuffle. dlrig is measured
with its map-style `Dataset` (random permutation) and its `IterableDataset`.

LitData and WebDataset are installed from PyPI into a benchmark virtual environment, MDS
(mosaicml-streaming) into its own (it pins numpy < 2.2 and imports torchvision at import
time); torch there is the same CPU wheel as the dev venv. On a VM "cold" is guest-cold: the
hypervisor may still cache the disk.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BATCH = 64
FORMATS = (
    "loose",
    "dlrig-map",
    "dlrig-stream",
    "lmdb",
    "hdf5",
    "hdf5-vlen",
    "webdataset",
    "litdata",
    "mds",
)
VENV = {"webdataset": "anchors", "litdata": "anchors", "mds": "mds"}
PACKAGES = {"anchors": ["litdata", "webdataset"], "mds": ["mosaicml-streaming"]}
# Shard sizes: each library's default (dlrig: from the filesystem; LitData's documented
# "64MB"; MDS's size_limit 1 << 26), except WebDataset's ShardWriter, whose 3 GB default would
# make one shard of this set and leave DataLoader workers idle: it gets dlrig's 256 MiB.
SHARD_BYTES = 256 << 20


# --- the dataset ------------------------------------------------------------------------------


def _make_images(job: tuple[str, int, int]) -> int:
    """Photograph-like JPEGs: a smooth colour field (a few random pixels upsampled) with
    grain on top (a window of one noise tile per process), at ImageNet-like sizes."""
    import numpy as np
    from PIL import Image

    root, start, stop = job
    total = 0
    tile = np.random.default_rng(start).integers(0, 256, (1024, 1024, 3), np.uint8)
    for number in range(start, stop):
        rng = np.random.default_rng(number)
        width = int(rng.integers(160, 501))
        height = int(np.clip(width * rng.uniform(0.6, 1.4), 120, 500))
        cells = rng.integers(
            0, 256, (int(rng.integers(3, 12)), int(rng.integers(3, 12)), 3), np.uint8
        )
        field = Image.fromarray(cells).resize((width, height), Image.Resampling.BILINEAR)
        x, y = (int(v) for v in rng.integers(0, 1024 - 500, 2))
        grain = Image.fromarray(tile[y : y + height, x : x + width])
        image = Image.blend(field, grain, float(rng.uniform(0.1, 0.4)))
        folder = Path(root) / f"n{number % 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"img_{number:06d}.jpg"
        image.save(path, format="JPEG", quality=int(rng.integers(70, 96)))
        total += path.stat().st_size
    return total


def make_dataset(root: Path, samples: int, jobs: int) -> None:
    stamp = root / ".complete"
    if stamp.exists() and stamp.read_text() == str(samples):
        return
    shutil.rmtree(root, ignore_errors=True)
    import multiprocessing

    step = -(-samples // (jobs * 8))
    parts = [(str(root), s, min(samples, s + step)) for s in range(0, samples, step)]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        pool.map(_make_images, parts)
    stamp.write_text(str(samples))


# --- packing (one fresh process per format) ---------------------------------------------------


def _listing(work: Path) -> list[tuple[str, int]]:
    return [tuple(row) for row in json.loads((work / "order.json").read_text())]  # type: ignore[misc]


def pack_format(fmt: str, work: Path) -> float:
    src, out = work / "src", work / "formats" / fmt
    shutil.rmtree(out, ignore_errors=True)
    __import__(LIBRARY[fmt])  # imports are not packing: done before the clock starts
    started = time.perf_counter()
    if fmt == "dlrig":
        from dlrig import pack

        pack.pack(src, out, pack.PackOptions(jobs=os.cpu_count()))
    else:
        out.mkdir(parents=True)
        rows = _listing(work)
        WRITERS[fmt](out, rows)
    os.sync()
    return time.perf_counter() - started


def _read(path: str) -> bytes:
    with open(path, "rb", buffering=0) as stream:
        return stream.readall()


def _write_lmdb(out: Path, rows: list[tuple[str, int]]) -> None:
    import lmdb

    total = sum(os.path.getsize(p) for p, _ in rows)
    env = lmdb.open(str(out), map_size=int(total * 1.5) + (256 << 20))
    for start in range(0, len(rows), 5000):
        with env.begin(write=True) as txn:
            for number in range(start, min(start + 5000, len(rows))):
                txn.put(b"%09d" % number, _read(rows[number][0]))
    env.sync(True)
    env.close()


def _write_hdf5(out: Path, rows: list[tuple[str, int]]) -> None:
    import h5py
    import numpy as np

    sizes = [os.path.getsize(p) for p, _ in rows]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint64)
    with h5py.File(out / "data.h5", "w") as h5:
        data = h5.create_dataset("data", shape=(int(offsets[-1]),), dtype=np.uint8)
        for start in range(0, len(rows), 1000):
            stop = min(start + 1000, len(rows))
            blob = b"".join(_read(p) for p, _ in rows[start:stop])
            data[int(offsets[start]) : int(offsets[stop])] = np.frombuffer(blob, np.uint8)
        h5.create_dataset("offsets", data=offsets)
        h5.create_dataset("labels", data=np.array([lb for _, lb in rows], np.int64))


def _write_hdf5_vlen(out: Path, rows: list[tuple[str, int]]) -> None:
    import h5py
    import numpy as np

    with h5py.File(out / "data.h5", "w") as h5:
        images = h5.create_dataset("images", shape=(len(rows),), dtype=h5py.vlen_dtype(np.uint8))
        for start in range(0, len(rows), 1000):
            chunk = rows[start : start + 1000]
            images[start : start + len(chunk)] = [
                np.frombuffer(_read(p), np.uint8) for p, _ in chunk
            ]
        h5.create_dataset("labels", data=np.array([lb for _, lb in rows], np.int64))


def _write_webdataset(out: Path, rows: list[tuple[str, int]]) -> None:
    import webdataset as wds

    with wds.ShardWriter(
        str(out / "shard-%06d.tar"), maxsize=SHARD_BYTES, maxcount=10**9, verbose=0
    ) as sink:
        for number, (path, label) in enumerate(rows):
            sink.write({"__key__": f"{number:09d}", "jpg": _read(path), "cls": label})


def _litdata_item(row: tuple[str, int]) -> dict[str, Any]:
    return {"image": _read(row[0]), "label": row[1]}


def _write_litdata(out: Path, rows: list[tuple[str, int]]) -> None:
    import litdata

    litdata.optimize(
        fn=_litdata_item,
        inputs=rows,
        output_dir=str(out),
        chunk_bytes="64MB",  # LitData's documented size; 256 MB chunks read slower here
        num_workers=os.cpu_count() or 1,
        mode="overwrite",
    )


def _write_mds(out: Path, rows: list[tuple[str, int]]) -> None:
    from streaming import MDSWriter

    with MDSWriter(out=str(out), columns={"image": "bytes", "label": "int"}) as sink:
        for path, label in rows:
            sink.write({"image": _read(path), "label": label})


LIBRARY = {"dlrig": "dlrig.pack", "lmdb": "lmdb", "hdf5": "h5py", "hdf5-vlen": "h5py"}
LIBRARY |= {"webdataset": "webdataset", "litdata": "litdata", "mds": "streaming"}
WRITERS = {
    "lmdb": _write_lmdb,
    "hdf5": _write_hdf5,
    "hdf5-vlen": _write_hdf5_vlen,
    "webdataset": _write_webdataset,
    "litdata": _write_litdata,
    "mds": _write_mds,
}


# --- reading (one fresh process per format and trial; the parent sets the page cache) -------


def decode(data: bytes) -> int:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        image.convert("RGB")
    return len(data)


def _work(stage: str) -> Any:
    return decode if stage == "decode" else len


def _collate(batch: list[Any]) -> tuple[int, int]:
    return len(batch), sum(b[0] if isinstance(b, tuple) else b for b in batch)


class MapSource:
    """Random access by sample number, opened lazily in each process (LMDB and HDF5 handles
    must not cross a fork)."""

    def __init__(self, fmt: str, work: Path, order: str, stage: str) -> None:
        self.fmt, self.work, self.order, self.stage = fmt, work, order, stage
        self.get: Any = None
        self.handles: list[Any] = []
        self.length = len(_listing(work))

    def __len__(self) -> int:
        return self.length

    def _open(self) -> Any:
        where = self.work / "formats" / self.fmt.removesuffix("-map")
        if self.fmt == "loose":
            paths = [p for p, _ in _listing(self.work)]
            return lambda i: _read(paths[i])
        if self.fmt == "dlrig-map":
            from dlrig.pack import PackIndex, PackReader

            reader = PackReader(PackIndex(where))
            self.handles.append(reader)
            return reader.get
        if self.fmt == "lmdb":
            import lmdb

            env = lmdb.open(
                str(where), readonly=True, lock=False, readahead=self.order == "sequential"
            )
            txn = env.begin()
            self.handles += [txn, env]
            return lambda i: txn.get(b"%09d" % i)
        import h5py

        h5 = h5py.File(where / "data.h5", "r")
        self.handles.append(h5)
        if self.fmt == "hdf5":
            data, offsets = h5["data"], h5["offsets"][:].tolist()
            return lambda i: data[offsets[i] : offsets[i + 1]].tobytes()
        images = h5["images"]
        return lambda i: images[i].tobytes()

    def __getitem__(self, number: int) -> int:
        if self.get is None:
            self.get = self._open()
        return _work(self.stage)(self.get(number))

    def close(self) -> None:
        for handle in self.handles:
            handle.abort() if hasattr(handle, "abort") else handle.close()
        self.handles, self.get = [], None


def _iterable(fmt: str, work: Path, order: str, stage: str) -> Any:
    where = work / "formats" / fmt.removesuffix("-stream")
    shuffled = order == "shuffled"
    fn = _work(stage)
    if fmt == "dlrig-stream":
        from dlrig.pack import IterableDataset

        return IterableDataset(where, batch_size=BATCH, shuffle=shuffled, seed=1, transform=fn)
    if fmt == "webdataset":
        import webdataset as wds

        urls = sorted(str(p) for p in where.glob("*.tar"))
        dataset = wds.WebDataset(urls, shardshuffle=100 if shuffled else False, empty_check=False)
        if shuffled:
            dataset = dataset.shuffle(1000)
        return dataset.map(lambda sample: fn(sample["jpg"]))
    if fmt == "litdata":
        import litdata

        class Litdata(litdata.StreamingDataset):  # type: ignore[misc]
            def __getitem__(self, index: Any) -> int:
                return fn(super().__getitem__(index)["image"])

        # A plain path is read in place ("local:" would copy every chunk into a cache first).
        return Litdata(str(where), shuffle=shuffled, seed=1)
    from streaming import StreamingDataset

    class Mds(StreamingDataset):  # type: ignore[misc]
        def __getitem__(self, index: int) -> int:
            return fn(super().__getitem__(index)["image"])

    return Mds(local=str(where), shuffle=shuffled, shuffle_seed=1, batch_size=BATCH)


def run_case(fmt: str, work: Path, case: dict[str, Any]) -> dict[str, Any]:
    import torch.utils.data

    order, stage, workers, count = case["order"], case["stage"], case["workers"], case["count"]
    opened = time.perf_counter()
    if fmt in ("dlrig-stream", "webdataset", "litdata", "mds"):
        dataset: Any = _iterable(fmt, work, order, stage)
        sampler = None
    else:
        dataset = MapSource(fmt, work, order, stage)
        sampler = list(range(len(dataset)))
        if order == "shuffled":
            random.Random(1).shuffle(sampler)
    started = time.perf_counter()
    done = size = 0
    if workers <= 1:
        items = (dataset[i] for i in sampler) if sampler is not None else iter(dataset)
        for item in items:
            done, size = done + 1, size + (item[0] if isinstance(item, tuple) else item)
            if done >= count:
                break
    else:
        loader = torch.utils.data.DataLoader(
            dataset, batch_size=BATCH, sampler=sampler, num_workers=workers, collate_fn=_collate
        )
        batches = iter(loader)
        done, size = next(batches)  # worker start-up is not reading: the clock starts after it
        started = time.perf_counter()
        first = done
        for batch_count, batch_bytes in batches:
            done, size = done + batch_count, size + batch_bytes
            if done >= count:
                break
        del batches, loader
        done_timed = done - first
    seconds = time.perf_counter() - started
    timed = done if workers <= 1 else done_timed
    if isinstance(dataset, MapSource):
        dataset.close()
    elif fmt == "dlrig-stream":
        dataset.stream.reader.close()
    del dataset
    gc.collect()
    return {
        "seconds": seconds,
        "samples": done,
        "timed_samples": timed,
        "bytes": size,
        "open_seconds": started - opened,
    }


def serve(fmt: str, work: Path) -> None:
    """Child: read cases from stdin, one JSON line each; answer each with a JSON line."""
    print(json.dumps({"ready": fmt}), flush=True)
    for line in sys.stdin:
        case = json.loads(line)
        try:
            result = run_case(fmt, work, case)
        except Exception as exc:  # noqa: BLE001 - reported as this case's failure
            result = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print(json.dumps(result), flush=True)


# --- the parent -------------------------------------------------------------------------------


def _venv_python(name: str, base: Path) -> str:
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


def _python_for(fmt: str, work: Path) -> str:
    return _venv_python(VENV[fmt], work.parent) if fmt in VENV else sys.executable


def _child(python: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), PYTHONWARNINGS="ignore")
    return subprocess.Popen(
        [python, str(Path(__file__).resolve()), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip


def data_files(fmt: str, work: Path) -> list[str]:
    if fmt == "loose":
        return [p for p, _ in _listing(work)]
    where = work / "formats" / fmt.removesuffix("-map").removesuffix("-stream")
    return sorted(
        str(p)
        for p in where.rglob("*")
        if p.is_file() and p.stat().st_size and p.name != "lock.mdb"
    )


def disk_bytes(path: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def _cases(decode_samples: int, samples: int, workers: int) -> list[dict[str, Any]]:
    return [
        {"stage": stage, "cache": cache, "order": order, "workers": w,
         "count": samples if stage == "raw" else min(decode_samples, samples)}
        for stage in ("raw", "decode")
        for cache in ("cold", "warm")
        for order in ("sequential", "shuffled")
        for w in (1, workers)
    ]  # fmt: skip


def _key(case: dict[str, Any]) -> str:
    return f"{case['stage']}/{case['cache']}/{case['order']}/{case['workers']}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=20000)
    parser.add_argument("--decode-samples", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/dlrig-pack-bench"))
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--pack", help=argparse.SUPPRESS)
    args = parser.parse_args()
    base: Path = args.workdir
    work = base / f"n{args.samples}"
    if args.serve:
        return serve(args.serve, work)
    if args.pack:
        return print(json.dumps({"seconds": pack_format(args.pack, work)}))
    from dlrig.bench.pack import set_cache

    formats = [f for f in FORMATS if f in args.formats.split(",")]
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    make_dataset(work / "src", args.samples, os.cpu_count() or 1)
    raw_bytes = sum(os.path.getsize(p) for p in (work / "src").rglob("*.jpg"))
    print(
        f"dataset: {args.samples} JPEGs, {raw_bytes / 1e6:.0f} MB ({time.perf_counter() - started:.0f} s to make)",
        flush=True,
    )
    pack_seconds, sizes = _pack_all(work, [f for f in formats if f != "loose"])
    sizes["loose"] = disk_bytes(work / "src")
    _check_webdataset_readback(work)
    cases = _cases(args.decode_samples, args.samples, args.workers)
    figures: dict[str, dict[str, list[float]]] = {f: {} for f in formats}
    checks: dict[str, dict[str, float]] = {f: {} for f in formats}
    for trial in range(args.trials):
        for fmt in formats:
            child = _child(
                _python_for(fmt, work),
                "--workdir",
                str(work.parent),
                "--samples",
                str(work.name[1:]),
                "--serve",
                fmt,
            )
            assert child.stdin and child.stdout
            assert json.loads(child.stdout.readline())["ready"] == fmt
            files = data_files(fmt, work)
            for case in cases:
                resident = set_cache(files, case["cache"])
                if case["cache"] == "cold" and resident > 0.01:
                    # The reader still maps its files (LitData keeps its chunks mapped after
                    # the dataset is gone): a fresh reader process lets the pages go.
                    child.stdin.close()
                    child.wait(timeout=120)
                    child = _child(
                        _python_for(fmt, work), "--workdir", str(work.parent),
                        "--samples", str(work.name[1:]), "--serve", fmt,
                    )  # fmt: skip
                    assert child.stdin and child.stdout
                    assert json.loads(child.stdout.readline())["ready"] == fmt
                    resident = set_cache(files, "cold")
                checks[fmt][_key(case)] = (
                    max(checks[fmt].get(_key(case), 0.0), resident)
                    if case["cache"] == "cold"
                    else min(checks[fmt].get(_key(case), 1.0), resident)
                )
                child.stdin.write(json.dumps(case) + "\n")
                child.stdin.flush()
                result = json.loads(child.stdout.readline())
                if "error" in result:
                    print(f"  {fmt} {_key(case)}: {result['error']}", flush=True)
                    continue
                if (
                    case["stage"] == "raw"
                    and result["bytes"] != raw_bytes
                    and case["count"] == args.samples
                ):
                    print(
                        f"  {fmt} {_key(case)}: read {result['bytes']} bytes, the set has {raw_bytes}",
                        flush=True,
                    )
                rate = result["timed_samples"] / result["seconds"]
                figures[fmt].setdefault(_key(case), []).append(rate)
                print(
                    f"  {fmt} {_key(case)}: {rate:,.0f}/s, {100 * resident:.1f}% resident",
                    flush=True,
                )
            child.stdin.close()
            child.wait(timeout=120)
            print(f"trial {trial + 1}/{args.trials}: {fmt} done", flush=True)
    _report(formats, cases, figures, checks, pack_seconds, sizes, raw_bytes, args, work)


def _pack_all(work: Path, formats: list[str]) -> tuple[dict[str, float], dict[str, int]]:
    from dlrig.bench.pack import set_cache

    stores = ["dlrig"] + [
        f
        for f in dict.fromkeys(f.removesuffix("-map").removesuffix("-stream") for f in formats)
        if f != "dlrig"
    ]
    seconds: dict[str, float] = {}
    sizes: dict[str, int] = {}
    sources = [str(p) for p in (work / "src").rglob("*.jpg")]
    for store in stores:
        set_cache(sources, "cold")  # each writer reads the source from disk, as in real use
        child = _child(
            _python_for(store, work),
            "--workdir",
            str(work.parent),
            "--samples",
            str(work.name[1:]),
            "--pack",
            store,
        )
        out, _ = child.communicate(timeout=3600)
        if child.returncode != 0:
            raise SystemExit(f"packing {store} failed")
        seconds[store] = json.loads(out.strip().splitlines()[-1])["seconds"]
        sizes[store] = disk_bytes(work / "formats" / store)
        print(
            f"packed {store}: {seconds[store]:.1f} s, {sizes[store] / 1e6:.0f} MB on disk",
            flush=True,
        )
        if store == "dlrig":  # every other format stores dlrig's order
            from dlrig.pack import PackIndex

            index = PackIndex(work / "formats" / "dlrig")
            src = work / "src"
            order = [(str(src / index.name(n)), index.labels[n]) for n in range(len(index))]
            (work / "order.json").write_text(json.dumps(order))
    for fmt in ("dlrig-map", "dlrig-stream"):
        seconds[fmt], sizes[fmt] = seconds["dlrig"], sizes["dlrig"]
    return seconds, sizes


READBACK = r"""
import json, sys, zlib, webdataset as wds
urls = sorted(sys.argv[1:])
print(json.dumps({s["__key__"]: [zlib.crc32(s["jpg"]), int(s["cls"])]
                  for s in wds.WebDataset(urls, shardshuffle=False, empty_check=False)}))
"""


def _check_webdataset_readback(work: Path) -> None:
    """`dlrig pack --format webdataset` read back by the real webdataset package."""
    from dlrig import pack

    out = work / "formats" / "dlrig-as-webdataset"
    pack.pack(work / "src", out, pack.PackOptions(fmt="webdataset", overwrite=True))
    tars = [str(p) for p in (out / "shards").glob("*.tar")]
    done = subprocess.run(
        [_venv_python("anchors", work.parent), "-c", READBACK, *tars],
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(done.stdout)
    expected = {}
    for shard in sorted((out / "shards").glob("*.idx")):
        from dlrig.pack.format import read_index

        index = read_index(shard)
        number = int(shard.stem.split("-")[1])
        first = number * json.loads((out / "manifest.json").read_text())["shards"][0]["samples"]
        for j in range(index.count):
            expected[f"{first + j:09d}"] = [index.crcs[j], index.labels[j]]
    same = seen == expected
    print(
        f"dlrig --format webdataset read back by webdataset {_version('webdataset', work)}: {len(seen)} samples, bytes and labels identical: {same}",
        flush=True,
    )
    shutil.rmtree(out)
    if not same:
        raise SystemExit("webdataset read back different data")


def _version(package: str, work: Path) -> str:
    done = subprocess.run(
        [
            _venv_python("anchors", work.parent),
            "-c",
            f"import importlib.metadata as m; print(m.version('{package}'))",
        ],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip()


def _report(formats, cases, figures, checks, pack_seconds, sizes, raw_bytes, args, work) -> None:  # type: ignore[no-untyped-def]
    median = {f: {k: statistics.median(v) for k, v in figures[f].items()} for f in formats}
    for stage in ("raw", "decode"):
        keys = [_key(c) for c in cases if c["stage"] == stage]
        print(
            f"\n{stage} reads, samples/s (median of {args.trials}; {'all' if stage == 'raw' else args.decode_samples} samples; 1 process and {args.workers} DataLoader workers)"
        )
        header = ["format", "pack s", "size MB"] + [
            k.split("/", 1)[1].replace("sequential", "seq").replace("shuffled", "shuf")
            for k in keys
        ]
        print(" | ".join(header))
        for fmt in formats:
            row = [
                fmt,
                f"{pack_seconds.get(fmt, 0):.1f}" if fmt != "loose" else "-",
                f"{sizes.get(fmt, 0) / 1e6:.0f}",
            ]
            row += [f"{median[fmt][k]:,.0f}" if k in median[fmt] else "n/a" for k in keys]
            print(" | ".join(row))
    bad = [
        f"{f} {k} ({100 * v:.1f}% resident)"
        for f in formats
        for k, v in checks[f].items()
        if (v > 0.01 if "/cold/" in k else v < 0.99)
    ]
    print(
        "\ncache checks (mincore): "
        + ("all cold ≤ 1% and warm ≥ 99% resident" if not bad else "FAILED: " + "; ".join(bad))
    )
    raw_keys = [_key(c) for c in cases if c["stage"] == "raw"]
    others = [f for f in formats if f not in ("loose", "dlrig-map", "dlrig-stream")]
    summary: dict[str, Any] = {"samples": args.samples, "raw_mb": round(raw_bytes / 1e6)}
    worst_other, worst_loose = float("inf"), float("inf")
    lost = []
    for key in raw_keys:
        dlrig = max(median[f].get(key, 0) for f in ("dlrig-map", "dlrig-stream") if f in median)
        best = max((median[f].get(key, 0), f) for f in others) if others else (0, "")
        if best[0]:
            worst_other = min(worst_other, dlrig / best[0])
            if dlrig < best[0]:
                lost.append(f"{key} ({best[1]} {best[0]:,.0f} vs dlrig {dlrig:,.0f})")
        if "/cold/" in key and "loose" in median and median["loose"].get(key):
            worst_loose = min(worst_loose, dlrig / median["loose"][key])
    packers = {f: s for f, s in pack_seconds.items() if f in others}
    fastest = min(packers.items(), key=lambda kv: kv[1]) if packers else ("", float("nan"))
    print(
        f"\ntarget raw ≥ every other format: {'met' if not lost else 'MISSED in ' + '; '.join(lost)} (worst ratio {worst_other:.2f})"
    )
    print(
        f"target ≥ 5x loose files cold: {'met' if worst_loose >= 5 else 'MISSED'} (worst {worst_loose:.1f}x)"
    )
    pack_ok = pack_seconds["dlrig"] <= fastest[1]
    print(
        f"target pack time ≤ fastest other ({fastest[0]} {fastest[1]:.1f} s): {'met' if pack_ok else 'MISSED'} (dlrig {pack_seconds['dlrig']:.1f} s)"
    )
    (work / "results.json").write_text(
        json.dumps(
            {"figures": figures, "checks": checks, "pack_seconds": pack_seconds, "sizes": sizes},
            indent=1,
        )
    )
    summary.update(
        raw_vs_best_other_min=round(worst_other, 2),
        raw_cold_vs_loose_min=round(worst_loose, 1),
        pack_s=round(pack_seconds["dlrig"], 1),
        fastest_other_pack_s=round(fastest[1], 1),
        fastest_other=fastest[0],
        cache_verified=not bad,
        targets_met=not lost and worst_loose >= 5 and pack_ok,
    )
    print(" ".join(f"{k}={v}" for k, v in summary.items()))


if __name__ == "__main__":
    main()

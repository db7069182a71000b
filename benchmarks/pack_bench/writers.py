"""Each format written by its own library, in one fresh process per format, timed up to
`os.sync()` (so every format pays for getting its bytes to disk; dlrig and LMDB also fsync on
their own). Every format holds the same samples in the same order: dlrig's packing order.

Shard sizes are each library's default (dlrig: from the filesystem; LitData's documented
"64MB"; MDS's size_limit 1 << 26), except WebDataset's ShardWriter, whose 3 GB default would
make one shard of this set and leave DataLoader workers idle: it gets 256 MiB.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

SHARD_BYTES = 256 << 20
STORES = ("dlrig", "lmdb", "hdf5", "hdf5-vlen", "webdataset", "litdata", "mds")
LIBRARY = {"dlrig": "dlrig.pack", "lmdb": "lmdb", "hdf5": "h5py", "hdf5-vlen": "h5py"}
LIBRARY |= {"webdataset": "webdataset", "litdata": "litdata", "mds": "streaming"}


def listing(work: Path) -> list[tuple[str, int]]:
    """(path, label) of every sample in dlrig's packing order (written after dlrig packs)."""
    return [(str(p), int(lb)) for p, lb in json.loads((work / "order.json").read_text())]


def read_file(path: str) -> bytes:
    with open(path, "rb", buffering=0) as stream:
        return stream.readall()


def pack_format(store: str, work: Path) -> float:
    """Pack `store` from work/src into work/formats/STORE; seconds taken, to `sync`."""
    src, out = work / "src", work / "formats" / store
    shutil.rmtree(out, ignore_errors=True)
    __import__(LIBRARY[store])  # imports are not packing: done before the clock starts
    started = time.perf_counter()
    if store == "dlrig":
        from dlrig import pack

        pack.pack(src, out, pack.PackOptions(jobs=os.cpu_count()))
    else:
        out.mkdir(parents=True)
        WRITERS[store](out, listing(work))
    os.sync()
    return time.perf_counter() - started


def write_order(work: Path) -> None:
    """The other formats store dlrig's order: written once dlrig has packed."""
    from dlrig.pack import PackIndex

    index = PackIndex(work / "formats" / "dlrig")
    src = work / "src"
    order = [(str(src / index.name(n)), index.labels[n]) for n in range(len(index))]
    (work / "order.json").write_text(json.dumps(order))


def _write_lmdb(out: Path, rows: list[tuple[str, int]]) -> None:
    import lmdb

    total = sum(os.path.getsize(p) for p, _ in rows)
    env = lmdb.open(str(out), map_size=int(total * 1.5) + (256 << 20))
    for start in range(0, len(rows), 5000):
        with env.begin(write=True) as txn:
            for number in range(start, min(start + 5000, len(rows))):
                txn.put(b"%09d" % number, read_file(rows[number][0]))
    env.sync(True)
    env.close()


def _write_hdf5(out: Path, rows: list[tuple[str, int]]) -> None:
    """One uint8 dataset of every sample back to back, plus offsets: the slice-friendly
    layout (one contiguous read per sample)."""
    import h5py
    import numpy as np

    sizes = [os.path.getsize(p) for p, _ in rows]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.uint64)
    with h5py.File(out / "data.h5", "w") as h5:
        data = h5.create_dataset("data", shape=(int(offsets[-1]),), dtype=np.uint8)
        for start in range(0, len(rows), 1000):
            stop = min(start + 1000, len(rows))
            blob = b"".join(read_file(p) for p, _ in rows[start:stop])
            data[int(offsets[start]) : int(offsets[stop])] = np.frombuffer(blob, np.uint8)
        h5.create_dataset("offsets", data=offsets)
        h5.create_dataset("labels", data=np.array([lb for _, lb in rows], np.int64))


def _write_hdf5_vlen(out: Path, rows: list[tuple[str, int]]) -> None:
    """The layout most tutorials show: a variable-length uint8 dataset, one element a sample."""
    import h5py
    import numpy as np

    with h5py.File(out / "data.h5", "w") as h5:
        images = h5.create_dataset("images", shape=(len(rows),), dtype=h5py.vlen_dtype(np.uint8))
        for start in range(0, len(rows), 1000):
            chunk = rows[start : start + 1000]
            images[start : start + len(chunk)] = [
                np.frombuffer(read_file(p), np.uint8) for p, _ in chunk
            ]
        h5.create_dataset("labels", data=np.array([lb for _, lb in rows], np.int64))


def _write_webdataset(out: Path, rows: list[tuple[str, int]]) -> None:
    import webdataset as wds

    with wds.ShardWriter(
        str(out / "shard-%06d.tar"), maxsize=SHARD_BYTES, maxcount=10**9, verbose=0
    ) as sink:
        for number, (path, label) in enumerate(rows):
            sink.write({"__key__": f"{number:09d}", "jpg": read_file(path), "cls": label})


def _litdata_item(row: tuple[str, int]) -> dict[str, Any]:
    return {"image": read_file(row[0]), "label": row[1]}


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
            sink.write({"image": read_file(path), "label": label})


WRITERS = {
    "lmdb": _write_lmdb,
    "hdf5": _write_hdf5,
    "hdf5-vlen": _write_hdf5_vlen,
    "webdataset": _write_webdataset,
    "litdata": _write_litdata,
    "mds": _write_mds,
}

READBACK = r"""
import json, sys, zlib, webdataset as wds
urls = sorted(sys.argv[1:])
print(json.dumps({s["__key__"]: [zlib.crc32(s["jpg"]), int(s["cls"])]
                  for s in wds.WebDataset(urls, shardshuffle=False, empty_check=False)}))
"""


def check_webdataset_readback(work: Path, python: str) -> str:
    """`dlrig pack --format webdataset` read back by the real webdataset package: one line."""
    from dlrig import pack
    from dlrig.pack.format import read_index

    out = work / "formats" / "dlrig-as-webdataset"
    pack.pack(work / "src", out, pack.PackOptions(fmt="webdataset", overwrite=True))
    tars = [str(p) for p in (out / "shards").glob("*.tar")]
    done = subprocess.run(
        [python, "-c", READBACK, *tars], capture_output=True, text=True, check=True
    )
    seen = json.loads(done.stdout)
    manifest = json.loads((out / "manifest.json").read_text())
    expected = {}
    for entry in manifest["shards"]:
        index = read_index(out / "shards" / f"{entry['name']}.idx")
        for j in range(index.count):
            expected[f"{entry['first_sample'] + j:09d}"] = [index.crcs[j], index.labels[j]]
    version = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('webdataset'))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    shutil.rmtree(out)
    if seen != expected:
        raise SystemExit("webdataset read back different data from dlrig --format webdataset")
    return (
        f"dlrig --format webdataset read back by webdataset {version}: {len(seen)} samples, "
        "bytes and labels identical"
    )

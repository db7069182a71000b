"""One reading process per format and trial: it imports its library once, then reads one
case per JSON line on stdin and answers each with a JSON line. The parent sets the cache
between cases; the dataset is built after it (so its index is read cold too) and its opening
time is reported apart from the reading."""

from __future__ import annotations

import gc
import json
import resource
import sys
import time
from pathlib import Path
from typing import Any

from pack_bench import BATCH, readers
from pack_bench.writers import LIBRARY


def _warm_imports(row: readers.Row, work: Path) -> None:
    """Everything a case imports, imported before any cache is dropped (a dropped cache would
    otherwise charge one format's reading with loading Python modules from disk)."""
    import PIL.Image
    import PIL.JpegImagePlugin
    import torch.utils.data  # noqa: F401

    if row.store:
        __import__(LIBRARY[row.store])
    sample = next((work / "src").rglob("*.jpg"))
    readers.decode(sample.read_bytes())
    PIL.Image.init()


def run_case(row: readers.Row, work: Path, case: dict[str, Any]) -> dict[str, Any]:
    import torch.utils.data

    workers, count = case["workers"], case["count"]
    opened = time.perf_counter()
    dataset, sampler = readers.build(row, work, case["order"], case["stage"])
    if workers <= 1 and isinstance(dataset, readers.MapSource):
        dataset.open()
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=BATCH,
        sampler=sampler,
        num_workers=workers if workers > 1 else 0,
        collate_fn=readers.collate,
    )
    batches = iter(loader)
    # Start-up (workers, first open) is not reading: the clock starts once every worker has
    # delivered its first batch (the workers make their first batches together, so timing
    # from the first one alone would count the others' work as free).
    done = size = 0
    for _ in range(max(1, workers)):
        batch_count, batch_bytes = next(batches)
        done, size = done + batch_count, size + batch_bytes
    started = time.perf_counter()
    cpu = resource.getrusage(resource.RUSAGE_SELF)
    first = done
    while done < count:
        try:
            batch_count, batch_bytes = next(batches)
        except StopIteration:
            break
        done, size = done + batch_count, size + batch_bytes
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    del batches, loader
    readers.close(dataset)
    del dataset
    gc.collect()
    return {
        "seconds": seconds,
        "samples": done,
        "timed_samples": done - first,
        "bytes": size,
        "open_seconds": started - opened,
        # This process's CPU (all its threads) while reading: meaningful for 1 process only.
        "cpu_seconds": (after.ru_utime + after.ru_stime) - (cpu.ru_utime + cpu.ru_stime),
    }


def serve(name: str, work: Path) -> None:
    row = readers.BY_NAME[name]
    _warm_imports(row, work)
    print(json.dumps({"ready": name}), flush=True)
    for line in sys.stdin:
        case = json.loads(line)
        try:
            result = run_case(row, work, case)
        except Exception as exc:  # noqa: BLE001 - reported as this case's failure
            result = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print(json.dumps(result), flush=True)

"""`dlrig pack`: many small files into a few large shards that feed a GPU faster.

Python API (torch is imported only by the Dataset classes):

    from dlrig import pack
    report = pack.pack("/data/imagenet/train", "/fast/imagenet.pack")    # resumable
    result = pack.verify("/fast/imagenet.pack")                           # result.damage
    dataset = pack.Dataset("/fast/imagenet.pack", transform=decode)      # map-style
    stream = pack.IterableDataset("/fast/imagenet.pack", batch_size=256)  # sharded, shuffled
    loader = pack.StatefulLoader(stream, num_workers=8)                   # state_dict() / load

The format is described in `dlrig.pack.format`; the reading order in `dlrig.pack.order`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlrig.errors import MissingExtraError
from dlrig.pack.format import FORMATS
from dlrig.pack.reader import PackIndex, PackReader
from dlrig.pack.verify import VerifyReport, verify
from dlrig.pack.writer import PackOptions, PackReport, pack
from dlrig.report import Progress, no_progress

if TYPE_CHECKING:
    from dlrig.pack.datasets import Dataset, IterableDataset, StatefulLoader

__all__ = [
    "FORMATS",
    "Dataset",
    "IterableDataset",
    "PackIndex",
    "PackJob",
    "PackOptions",
    "PackReader",
    "PackReport",
    "StatefulLoader",
    "VerifyReport",
    "pack",
    "run",
    "verify",
]


@dataclass(frozen=True)
class PackJob:
    """What `dlrig pack SRC DST` packs: SRC (a folder, a .csv/.jsonl list, or module:factory)
    into DST, with `options` (format, shard size, ...)."""

    src: str | Path
    dst: str | Path
    options: PackOptions = field(default_factory=PackOptions)


def run(options: PackJob, *, progress: Progress = no_progress) -> PackReport:
    """Pack `options.src` into `options.dst`; a pack of the same source and options that was
    interrupted resumes. No `machine`: the filesystem of DST picks the shard size."""

    def samples_done(done: int, total: int) -> None:
        progress(f"pack: {done:,} of {total:,} samples", done / total if total else 1.0)

    return pack(options.src, options.dst, options.options, samples_done)


_TORCH_NAMES = ("Dataset", "IterableDataset", "StatefulLoader")


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:
        try:
            from dlrig.pack import datasets  # lazy: torch (the torch extra)
        except ImportError as exc:
            if "torch" not in str(exc):
                raise
            raise MissingExtraError("torch", "torch", f"dlrig.pack.{name}") from None
        return getattr(datasets, name)
    raise AttributeError(f"module 'dlrig.pack' has no attribute {name!r}")

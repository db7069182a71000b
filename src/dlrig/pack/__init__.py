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

from typing import TYPE_CHECKING, Any

from dlrig.pack.format import FORMATS
from dlrig.pack.reader import PackIndex, PackReader
from dlrig.pack.verify import VerifyReport, verify
from dlrig.pack.writer import PackOptions, PackReport, pack

if TYPE_CHECKING:
    from dlrig.pack.datasets import Dataset, IterableDataset, StatefulLoader

__all__ = [
    "FORMATS",
    "Dataset",
    "IterableDataset",
    "PackIndex",
    "PackOptions",
    "PackReader",
    "PackReport",
    "StatefulLoader",
    "VerifyReport",
    "pack",
    "verify",
]

_TORCH_NAMES = ("Dataset", "IterableDataset", "StatefulLoader")


def __getattr__(name: str) -> Any:
    if name in _TORCH_NAMES:
        try:
            from dlrig.pack import datasets
        except ImportError as exc:
            if "torch" not in str(exc):
                raise
            from dlrig.errors import MissingExtraError

            raise MissingExtraError("torch", "torch", f"dlrig.pack.{name}") from None
        return getattr(datasets, name)
    raise AttributeError(f"module 'dlrig.pack' has no attribute {name!r}")

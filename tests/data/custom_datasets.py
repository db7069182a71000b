"""User-style Dataset factories for `dlrig bench dataloader --dataset package.module:factory`."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class Squares(Dataset):
    """A small map-style dataset with a little CPU work per sample."""

    def __len__(self) -> int:
        return 512

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        x = torch.full((3, 32, 32), float(index))
        return (x @ x.transpose(1, 2)).mean(dim=0), index % 10


def make_squares() -> Dataset:
    return Squares()


def make_raising() -> Dataset:
    raise FileNotFoundError("/data/imagenet/train: no such directory")


class Broken(Squares):
    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        raise KeyError(f"label for sample {index}")


def make_broken() -> Dataset:
    return Broken()


def make_not_a_dataset() -> object:
    return 42

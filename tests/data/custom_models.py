"""User-style model factories for `dlrig fit package.module:factory` tests."""

from __future__ import annotations

import torch
from torch import nn


def make_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024))


def make_raising() -> nn.Module:
    raise FileNotFoundError("weights/encoder.pt")


class DataDependent(nn.Module):
    """Control flow on a tensor's value: cannot be traced on fake tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(256, 256)
        self.b = nn.Linear(256, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.a(x)
        return self.b(x)


def make_data_dependent() -> nn.Module:
    return DataDependent()


def make_not_a_module() -> str:
    return "not a model"

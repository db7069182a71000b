"""Sizes that name what a shape-mismatch message is about (`model_dimensions.csv`): the
embedding widths of common encoders and language models, and the sequence lengths that models'
learned position embeddings hold."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from dlrig.knowledge.tables import records


@dataclass(frozen=True)
class ModelDimension:
    kind: str
    size: int
    models: str
    source: str
    as_of: str


@functools.cache
def _table() -> tuple[ModelDimension, ...]:
    return records("model_dimensions", ModelDimension)


@functools.cache
def hidden_widths() -> frozenset[int]:
    return frozenset(d.size for d in _table() if d.kind == "hidden_width")


@functools.cache
def max_positions() -> frozenset[int]:
    return frozenset(d.size for d in _table() if d.kind == "max_positions")


def models_of(size: int, kind: str = "hidden_width") -> str:
    """The models the table gives for a size ('' when it has none)."""
    return "; ".join(d.models for d in _table() if d.kind == kind and d.size == size)

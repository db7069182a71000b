"""Serving weight formats beyond the GPU's own dtypes: GGUF quantisation mixes (llama.cpp) by
their bits per weight (`fit_weight_formats.csv`), and EXL2 (ExLlamaV2), whose bits per weight
the user chooses when quantising and names in the format ("exl2-4.65")."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from dlrig.knowledge.tables import records

# ExLlamaV2's convert.py takes -b from 2.0 to 8.0 bits per weight (its measured mixes).
EXL2_BITS = (2.0, 8.0)
_EXL2 = re.compile(r"exl2-(\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class WeightFormat:
    format: str
    bits_per_weight: float
    source: str
    as_of: str


@functools.cache
def formats() -> dict[str, WeightFormat]:
    return {row.format: row for row in records("fit_weight_formats", WeightFormat)}


def bits_per_weight(name: str) -> float | None:
    """Bits per weight of a GGUF mix ("gguf-q4_k_m") or an EXL2 quantisation ("exl2-4.65");
    None for a name that is neither (or an EXL2 rate outside what ExLlamaV2 makes)."""
    lowered = name.lower()
    if lowered in formats():
        return formats()[lowered].bits_per_weight
    match = _EXL2.fullmatch(lowered)
    if match:
        bits = float(match.group(1))
        return bits if EXL2_BITS[0] <= bits <= EXL2_BITS[1] else None
    return None

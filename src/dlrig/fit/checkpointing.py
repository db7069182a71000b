"""Checkpointing a fraction of the blocks: which blocks, and how many layers a trace needs.

fms-fsdp's `selective_checkpointing=p` checkpoints the fraction p of the transformer blocks,
evenly spaced (`apply_fsdp_checkpointing`: block i, counted from 1, is checkpointed when
i·p reaches the next cut-off, which starts at 1/2); transformers' `every_n_layers=n` and
torchtitan's layer-level `selective_ac_option="n"` checkpoint every n-th block from the first,
about the fraction 1/n (one block more where n does not divide the depth). The blocks left out keep all their activations and are not run twice. For p = k/b the
pattern repeats every b blocks, so a trace of whole repeats of it (2 and 3 of them, like every
other trace) extends affinely to the full depth like a plain one. Numpy-free and torch-free:
options and tracing both use it.
"""

from __future__ import annotations

from fractions import Fraction
from math import lcm

from dlrig.errors import InputError

# A period of b blocks makes the trace b times deeper (lcm with the model's own layer pattern):
# up to 4 covers what the recipes use (1/2, 1/3, 2/3, 1/4, 3/4) and keeps a dense model's trace
# at 8 and 12 layers at most
MAX_PERIOD = 4
FLAG = "--checkpoint-blocks"


def fraction_of(value: float) -> Fraction:
    """The fraction as a ratio of small whole numbers, or a one-line refusal."""
    if value == 0.0:
        raise InputError(
            f"{FLAG} 0 checkpoints no block (fms-fsdp's selective_checkpointing=0)",
            fix="drop --grad-checkpointing and --checkpoint-blocks",
        )
    if not 0.0 < value <= 1.0:
        raise InputError(
            f"{FLAG} {value!r} is not a fraction of the blocks above 0 and at most 1",
            fix=f"pass {FLAG} 1/2 (every other block), 1/3, 2/3, 1/4 or 3/4; 1 checkpoints every block",
        )
    ratio = Fraction(value).limit_denominator(MAX_PERIOD)
    if abs(float(ratio) - value) > 1e-3:
        nearest = max(ratio, Fraction(1, MAX_PERIOD))
        raise InputError(
            f"{FLAG} {value:g}: dlrig traces a pattern that repeats within {MAX_PERIOD} blocks",
            fix=f"use the nearest of 1/4, 1/3, 1/2, 2/3, 3/4 (here {nearest})",
        )
    return ratio


def parse(text: str) -> float:
    """`1/2`, `0.5` or `50%` as a float (the CLI's spelling of a fraction)."""
    raw = text.strip()
    try:
        if raw.endswith("%"):
            return float(raw[:-1]) / 100.0
        return float(Fraction(raw))
    except (ValueError, ZeroDivisionError):
        raise InputError(
            f"{FLAG} {text!r} is not a fraction",
            fix=f"write it as {FLAG} 1/2, {FLAG} 0.5 or {FLAG} 50%",
        ) from None


def pattern(blocks: int, value: float) -> list[bool]:
    """Which of `blocks` blocks are checkpointed, in order (fms-fsdp's even spacing)."""
    ratio = fraction_of(value)
    chosen = []
    cut_off = Fraction(1, 2)
    for index in range(1, blocks + 1):
        take = index * ratio >= cut_off
        if take:
            cut_off += 1
        chosen.append(take)
    return chosen


def traced_period(layer_period: int, value: float) -> int:
    """Layers in one repeat of both the model's layer pattern and the checkpointing pattern."""
    return lcm(layer_period, fraction_of(value).denominator)


def describe(value: float) -> str:
    ratio = fraction_of(value)
    if ratio == 1:
        return "every block"
    if ratio.numerator == 1:
        return f"1 block in {ratio.denominator} ({ratio})"
    return f"{ratio.numerator} blocks in {ratio.denominator}"

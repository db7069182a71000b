"""`nvidia-smi pmon`: per-process SM, memory, encoder and decoder use, one row per sample.

    # gpu         pid   type     sm    mem    enc    dec    jpg    ofa    command
    # Idx           #    C/G      %      %      %      %      %      %    name
        0      10309     C     99      7      -      -      -      -    gpu_burn

Older drivers print fewer columns (no jpg/ofa; `fb` MiB before sm on some), so columns are
found by the header's names, not their positions. "-" is no sample in that interval.
"""

from __future__ import annotations

from typing import NamedTuple


class ProcessUse(NamedTuple):
    sm_percent: float | None
    encoder_percent: float | None
    decoder_percent: float | None


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None  # "-": no sample for this process in that interval


def read(text: str) -> dict[tuple[int, int], ProcessUse]:
    """(GPU index, pid) -> the last row pmon printed for that process."""
    columns: list[str] = []
    found: dict[tuple[int, int], ProcessUse] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            names = line.lstrip("#").split()
            if names and names[0].lower() == "gpu":
                columns = [name.lower() for name in names]
            continue
        words = line.split()
        if not columns or len(words) < len(columns) - 1 or not words[0].isdigit():
            continue
        row = dict(zip(columns, words, strict=False))
        if not row.get("pid", "").isdigit():
            continue
        found[(int(row["gpu"]), int(row["pid"]))] = ProcessUse(
            _number(row.get("sm", "-")), _number(row.get("enc", "-")), _number(row.get("dec", "-"))
        )
    return found

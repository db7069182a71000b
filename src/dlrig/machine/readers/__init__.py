"""Recorded evidence -> Machine: the formats `dlrig doctor --from FILE` understands.

The format is detected from the content, not the file name, because users paste outputs into
files named anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from dlrig.errors import InputError
from dlrig.inputs import read_text
from dlrig.machine.model import Machine
from dlrig.machine.readers import (
    collect_env,
    kernel_log,
    nvsmi_capture,
    nvsmi_csv,
    nvsmi_text,
    nvsmi_xml,
    snapshot,
)

MAX_INPUT_BYTES = 100 * 1000 * 1000

FORMATS = (
    "a dlrig snapshot (dlrig doctor --save)",
    "nvidia-smi -q -x XML",
    "nvidia-smi -q text",
    "nvidia-smi --query-gpu CSV",
    "an nvidia-smi capture (dlrig monitor record)",
    "python -m torch.utils.collect_env output",
    "a kernel log (dmesg) with NVRM lines",
)


def _detect(text: str) -> tuple[str, Callable[[str, str | None], Machine]] | None:
    head = text.lstrip()[:4096]
    if snapshot.looks_like(text):
        return "snapshot", snapshot.read
    if head.startswith("<?xml") or head.startswith("<nvidia_smi_log") or "<nvidia_smi_log" in head:
        return "nvidia-smi XML", nvsmi_xml.read
    if nvsmi_capture.looks_like(text):
        return "nvidia-smi capture", nvsmi_capture.read
    if nvsmi_text.looks_like(text):
        return "nvidia-smi -q text", nvsmi_text.read
    if collect_env.looks_like(text):
        return "collect_env output", collect_env.read
    if nvsmi_csv.looks_like(text):
        return "nvidia-smi CSV", nvsmi_csv.read
    if kernel_log.looks_like(text):
        return "kernel log", kernel_log.read
    return None


def load(path: Path | str) -> Machine:
    """Read a recorded machine from a file; InputError (exit 2) for anything unreadable."""
    text = read_text(path, "recorded machine evidence", MAX_INPUT_BYTES)
    detected = _detect(text)
    if detected is None:
        raise InputError(
            f"{path}: not a format dlrig reads",
            fix="give one of: " + "; ".join(FORMATS),
        )
    kind, reader = detected
    try:
        machine = reader(text, str(path))
    except ValueError as exc:
        raise InputError(
            f"{path}: unreadable {kind}: {exc}", fix="give a complete, unedited file"
        ) from None
    return machine


def load_text(text: str, label: str = "<text>") -> Machine:
    """The same detection for text already in memory (tests, stdin)."""
    detected = _detect(text)
    if detected is None:
        raise InputError(
            f"{label}: not a format dlrig reads", fix="give one of: " + "; ".join(FORMATS)
        )
    kind, reader = detected
    try:
        machine = reader(text, label)
    except ValueError as exc:
        raise InputError(f"{label}: unreadable {kind}: {exc}") from None
    return replace(machine)

"""Recorded evidence -> Machine: the formats `dlrig doctor --from FILE` understands.

The format is detected from the content's structure, not the file name (users paste outputs
into files named anything) and not from a word found anywhere: a README that mentions
`NVRM: Xid` is not a kernel log, a collect_env paste is not GPU telemetry.

    readers.load(path)              one file ("-" = stdin; gzip, pipes and /proc files read too)
    readers.load_many(paths)        several files of one machine, merged (doctor --from A --from B);
                                    files of different machines are refused
    readers.load_gpu_readings(...)  only formats that carry GPU readings (monitor --replay)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlrig.errors import InputError
from dlrig.machine.model import Machine
from dlrig.machine.readers import (
    amd_smi,
    collect_env,
    hl_smi,
    kernel_log,
    nvsmi_capture,
    nvsmi_csv,
    nvsmi_table,
    nvsmi_text,
    nvsmi_xml,
    rocm_smi,
    snapshot,
)
from dlrig.machine.readers.merge import check_same_machine, merge
from dlrig.machine.readers.source import MAX_INPUT_BYTES as MAX_INPUT_BYTES
from dlrig.machine.readers.source import read_evidence

FORMATS = (
    "a dlrig snapshot (dlrig doctor --save)",
    "nvidia-smi -q -x XML",
    "nvidia-smi -q text",
    "nvidia-smi --query-gpu CSV",
    "the plain nvidia-smi table",
    "an nvidia-smi capture (dlrig monitor record)",
    "python -m torch.utils.collect_env output",
    "a kernel log (dmesg, dmesg -T, journalctl -k)",
    "rocm-smi --json or amd-smi metric --json (AMD)",
    "the hl-smi table or hl-smi -Q CSV (Intel Gaudi)",
)
TELEMETRY_FORMATS = (
    "nvidia-smi -q -x XML, -q text, --query-gpu CSV, the plain nvidia-smi table, a capture, "
    "rocm-smi --json, hl-smi (table or -Q CSV), a dlrig snapshot taken on the machine, or a kernel log for Xid events"
)


@dataclass(frozen=True)
class Format:
    name: str
    looks_like: Callable[[str], bool]
    read: Callable[[str, str | None], Machine]
    gpu_readings: bool  # carries measured GPU state (memory, utilisation, temperature...)


# Tried in this order; the first whose shape the text has is the format.
_DETECTION_ORDER = (
    # Before the snapshot, which takes any JSON object: rocm-smi's opens with a "cardN" object.
    Format("rocm-smi JSON", rocm_smi.looks_like, rocm_smi.read, True),
    Format("amd-smi JSON", amd_smi.looks_like, amd_smi.read, True),
    Format("snapshot", snapshot.looks_like, snapshot.read, True),
    Format("nvidia-smi XML", nvsmi_xml.looks_like, nvsmi_xml.read, True),
    Format("nvidia-smi capture", nvsmi_capture.looks_like, nvsmi_capture.read, True),
    Format("nvidia-smi -q text", nvsmi_text.looks_like, nvsmi_text.read, True),
    # GPU names from torch, no readings: never GPU telemetry.
    Format("collect_env output", collect_env.looks_like, collect_env.read, False),
    Format("hl-smi table", hl_smi.looks_like_table, hl_smi.read_table, True),
    Format("hl-smi CSV", hl_smi.looks_like_csv, hl_smi.read_csv, True),
    Format("nvidia-smi table", nvsmi_table.looks_like, nvsmi_table.read, True),
    Format("nvidia-smi CSV", nvsmi_csv.looks_like, nvsmi_csv.read, True),
    Format("kernel log", kernel_log.looks_like, kernel_log.read, True),
)


def detect(text: str) -> Format | None:
    return next((fmt for fmt in _DETECTION_ORDER if fmt.looks_like(text)), None)


def _not_readable(label: str) -> InputError:
    return InputError(
        f"{label}: not a format dlrig reads", fix="give one of: " + "; ".join(FORMATS)
    )


def _read(fmt: Format, text: str, label: str) -> Machine:
    try:
        return fmt.read(text, label)
    except ValueError as exc:
        raise InputError(
            f"{label}: unreadable {fmt.name}: {exc}", fix="give a complete, unedited file"
        ) from None


def load_text(text: str, label: str = "<text>") -> Machine:
    """A recorded machine from text already in memory (tests, stdin)."""
    fmt = detect(text)
    if fmt is None:
        raise _not_readable(label)
    return _read(fmt, text, label)


def load(path: Path | str) -> Machine:
    """Read a recorded machine from a file, `-` (stdin), a gzip file, a pipe (`<(cmd)`) or a
    /proc file; InputError (exit 2) for anything unreadable."""
    label = "<stdin>" if str(path) == "-" else str(path)
    return load_text(read_evidence(path), label)


def load_many(paths: Sequence[Path | str]) -> Machine:
    """Several recordings of one machine merged into one (each file must be readable); files
    that show different machines (driver, GPUs, host) are refused, naming the disagreement."""
    if not paths:
        raise InputError("no recorded file given", fix="give --from FILE (repeatable)")
    if sum(1 for p in paths if str(p) == "-") > 1:
        raise InputError("--from - given twice", fix="stdin can be read once: give - once")
    machines = [load(path) for path in paths]
    check_same_machine(machines)
    return merge(machines)


def _has_readings(machine: Machine) -> bool:
    for gpu in machine.gpus or ():
        measured = (
            gpu.memory_used_bytes,
            gpu.utilization_gpu_percent,
            gpu.temperature_c,
            gpu.power_draw_watts,
        )
        if any(value is not None for value in measured):
            return True
    return False


def load_gpu_readings(text: str, label: str) -> Machine:
    """Like load_text, but only for files that hold GPU readings (or Xid events).

    A collect_env paste names GPUs without measuring them: replaying it would show made-up
    healthy GPUs, so it is refused (InputError, exit 2), as is a snapshot without readings.
    """
    fmt = detect(text)
    if fmt is None:
        raise InputError(
            f"{label}: not a format dlrig reads", fix="give GPU readings: " + TELEMETRY_FORMATS
        )
    if not fmt.gpu_readings:
        raise InputError(
            f"{label}: a {fmt.name} names GPUs but holds no GPU readings to replay",
            fix="give " + TELEMETRY_FORMATS,
        )
    machine = _read(fmt, text, label)
    if machine.kernel_log is None and not _has_readings(machine):
        raise InputError(
            f"{label}: this {fmt.name} holds no GPU readings (memory, utilisation, temperature)",
            fix="give " + TELEMETRY_FORMATS,
        )
    return machine

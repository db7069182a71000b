"""`nvidia-smi --query-gpu=... --format=csv` -> GPUs.

Headers carry units in brackets ("memory.total [MiB]"); values repeat the unit ("81559 MiB")
unless `nounits` was asked for. Only the fields present are read: any subset works.
"""

from __future__ import annotations

import csv
import io
import re

from dlrig.machine.model import (
    Driver,
    EccCounts,
    Gpu,
    GpuProcess,
    Machine,
    RemappedRows,
    RetiredPages,
)
from dlrig.machine.readers import fields, values
from dlrig.machine.readers.common import catalogue_id_for, gpu_query_machine

_UNIT_IN_HEADER = re.compile(r"\s*\[([^\]]+)\]\s*$")
_REASON_PREFIXES = ("clocks_event_reasons.", "clocks_throttle_reasons.")
_REASON_SKIP = {"supported", "active"}


def rows(text: str) -> list[dict[str, str]]:
    """CSV rows keyed by the field name without its unit suffix."""
    reader = csv.reader(io.StringIO(text.strip()), skipinitialspace=True)
    table = [row for row in reader if row]
    if not table:
        return []
    header = [_UNIT_IN_HEADER.sub("", name).strip() for name in table[0]]
    units = [_UNIT_IN_HEADER.search(name) for name in table[0]]
    result = []
    for row in table[1:]:
        record = {}
        for name, unit, value in zip(header, units, row, strict=False):
            value = value.strip()
            # With nounits the header keeps the unit; put it back so sizes parse the same way.
            if unit and re.fullmatch(r"-?\d+(\.\d+)?", value):
                value = f"{value} {unit.group(1)}"
            record[name] = value
        result.append(record)
    return result


def _reasons(row: dict[str, str]) -> tuple[str, ...] | None:
    active = []
    seen = False
    for key, raw in row.items():
        for prefix in _REASON_PREFIXES:
            if key.startswith(prefix):
                name = key.removeprefix(prefix)
                if name in _REASON_SKIP:
                    continue
                state = values.flag(raw)
                if state is None:
                    continue
                seen = True
                if state:
                    active.append(name)
    return tuple(active) if seen else None


# The --query-gpu field of each one-value Gpu field (fields.GPU says how its text is read).
_GPU_COLUMNS = {
    "uuid": "uuid",
    "pci_bus_id": "pci.bus_id",
    "serial": "serial",
    "vbios_version": "vbios_version",
    "memory_total_bytes": "memory.total",
    "memory_used_bytes": "memory.used",
    "compute_capability": "compute_cap",
    "persistence_mode": "persistence_mode",
    "performance_state": "pstate",
    "power_default_limit_watts": "power.default_limit",
    "temperature_c": "temperature.gpu",
    "ecc_mode_enabled": "ecc.mode.current",
    "ecc_mode_pending": "ecc.mode.pending",
    "mig_mode_enabled": "mig.mode.current",
    "utilization_gpu_percent": "utilization.gpu",
    "utilization_memory_percent": "utilization.memory",
    "sm_clock_max_mhz": "clocks.max.sm",
    "memory_clock_max_mhz": "clocks.max.memory",
    "fan_speed_percent": "fan.speed",
    "memory_temperature_c": "temperature.memory",
}
# Fields named differently by some drivers: the first of these that has a value.
_GPU_COLUMN_CHOICES = {
    "power_draw_watts": ("power.draw", "power.draw.average"),
    "power_limit_watts": ("power.limit", "enforced.power.limit"),
    "sm_clock_mhz": ("clocks.current.sm", "clocks.sm"),
    "memory_clock_mhz": ("clocks.current.memory", "clocks.mem"),
}
_PCIE_COLUMNS = {
    "gen_current": "pcie.link.gen.current",
    "width_current": "pcie.link.width.current",
    "width_max": "pcie.link.width.max",
}
_PCIE_GEN_MAXIMA = ("pcie.link.gen.max", "pcie.link.gen.hostmax", "pcie.link.gen.gpumax")
_ECC_COLUMNS = {
    "volatile_corrected": "ecc.errors.corrected.volatile.total",
    "volatile_uncorrected": "ecc.errors.uncorrected.volatile.total",
    "aggregate_corrected": "ecc.errors.corrected.aggregate.total",
    "aggregate_uncorrected": "ecc.errors.uncorrected.aggregate.total",
}
_RETIRED_COLUMNS = {
    "single_bit": "retired_pages.single_bit_ecc.count",
    "double_bit": "retired_pages.double_bit.count",
    "pending": "retired_pages.pending",
}
_REMAPPED_COLUMNS = {
    "correctable": "remapped_rows.correctable",
    "uncorrectable": "remapped_rows.uncorrectable",
    "pending": "remapped_rows.pending",
    "failure": "remapped_rows.failure",
}


def gpu_from_row(position: int, row: dict[str, str]) -> Gpu:
    name = values.text(row.get("name")) or "unknown NVIDIA GPU"
    index = values.integer(row.get("index"))
    return Gpu(
        index=index if index is not None else position,
        name=name,
        catalogue_id=catalogue_id_for(name),
        pcie=fields.pcie_link(_PCIE_COLUMNS, _PCIE_GEN_MAXIMA, row.get),
        clocks_event_reasons=_reasons(row),
        ecc_errors=EccCounts(**fields.read(fields.ECC, _ECC_COLUMNS, row.get)),
        retired_pages=RetiredPages(**fields.read(fields.RETIRED, _RETIRED_COLUMNS, row.get)),
        remapped_rows=RemappedRows(**fields.read(fields.REMAPPED, _REMAPPED_COLUMNS, row.get)),
        **fields.read(fields.GPU, _GPU_COLUMNS, row.get),
        **fields.read(fields.GPU, _GPU_COLUMN_CHOICES, fields.first_found(row.get)),
    )


# `--query-compute-apps` lists compute processes only, so the kind is always "C".
_PROCESS_COLUMNS = {"name": "process_name", "used_memory_bytes": "used_gpu_memory"}


def processes_by_gpu(text: str) -> dict[str, tuple[GpuProcess, ...]]:
    """`--query-compute-apps` CSV grouped by GPU UUID (or bus id when the UUID is absent)."""
    grouped: dict[str, list[GpuProcess]] = {}
    for row in rows(text):
        pid = values.integer(row.get("pid"))
        if pid is None:
            continue
        key = values.text(row.get("gpu_uuid")) or values.text(row.get("gpu_bus_id")) or "?"
        grouped.setdefault(key, []).append(
            GpuProcess(
                pid=pid,
                kind="C",
                **fields.read(fields.PROCESS, _PROCESS_COLUMNS, row.get),
            )
        )
    return {key: tuple(procs) for key, procs in grouped.items()}


def looks_like(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0]
    return "," in first and any(
        field.strip().split(" [")[0] in {"name", "uuid", "pci.bus_id", "memory.total", "index"}
        for field in first.split(",")
    )


def read(text: str, path: str | None) -> Machine:
    table = rows(text)
    if not table:
        raise ValueError("the CSV has a header but no GPU rows")
    gpus = tuple(gpu_from_row(i, row) for i, row in enumerate(table))
    driver = Driver(
        version=values.text(table[0].get("driver_version")),
        nvidia_pci_devices=len(gpus),
        kernel_module_loaded=True,
    )
    return gpu_query_machine("nvidia-smi-csv", "nvidia-smi --query-gpu", path, driver, gpus)

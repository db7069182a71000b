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
    Origin,
    PcieLink,
    RemappedRows,
    RetiredPages,
)
from dlrig.machine.readers import values
from dlrig.machine.readers.common import catalogue_id_for, recorded_only_issues

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


def gpu_from_row(position: int, row: dict[str, str]) -> Gpu:
    name = values.text(row.get("name")) or "unknown NVIDIA GPU"
    index = values.integer(row.get("index"))
    gens = [
        g
        for g in (
            values.integer(row.get("pcie.link.gen.max")),
            values.integer(row.get("pcie.link.gen.hostmax")),
            values.integer(row.get("pcie.link.gen.gpumax")),
        )
        if g is not None
    ]
    return Gpu(
        index=index if index is not None else position,
        name=name,
        uuid=values.text(row.get("uuid")),
        pci_bus_id=values.text(row.get("pci.bus_id")),
        catalogue_id=catalogue_id_for(name),
        serial=values.text(row.get("serial")),
        vbios_version=values.text(row.get("vbios_version")),
        memory_total_bytes=values.size_bytes(row.get("memory.total")),
        memory_used_bytes=values.size_bytes(row.get("memory.used")),
        compute_capability=values.text(row.get("compute_cap")),
        pcie=PcieLink(
            gen_current=values.integer(row.get("pcie.link.gen.current")),
            gen_max=min(gens) if gens else None,
            width_current=values.link_width(row.get("pcie.link.width.current")),
            width_max=values.link_width(row.get("pcie.link.width.max")),
        ),
        persistence_mode=values.flag(row.get("persistence_mode")),
        performance_state=values.text(row.get("pstate")),
        power_draw_watts=values.number(row.get("power.draw") or row.get("power.draw.average")),
        power_limit_watts=values.number(row.get("power.limit") or row.get("enforced.power.limit")),
        power_default_limit_watts=values.number(row.get("power.default_limit")),
        temperature_c=values.number(row.get("temperature.gpu")),
        clocks_event_reasons=_reasons(row),
        ecc_mode_enabled=values.flag(row.get("ecc.mode.current")),
        ecc_mode_pending=values.flag(row.get("ecc.mode.pending")),
        ecc_errors=EccCounts(
            volatile_corrected=values.integer(row.get("ecc.errors.corrected.volatile.total")),
            volatile_uncorrected=values.integer(row.get("ecc.errors.uncorrected.volatile.total")),
            aggregate_corrected=values.integer(row.get("ecc.errors.corrected.aggregate.total")),
            aggregate_uncorrected=values.integer(row.get("ecc.errors.uncorrected.aggregate.total")),
        ),
        retired_pages=RetiredPages(
            single_bit=values.integer(row.get("retired_pages.single_bit_ecc.count")),
            double_bit=values.integer(row.get("retired_pages.double_bit.count")),
            pending=values.flag(row.get("retired_pages.pending")),
        ),
        remapped_rows=RemappedRows(
            correctable=values.integer(row.get("remapped_rows.correctable")),
            uncorrectable=values.integer(row.get("remapped_rows.uncorrectable")),
            pending=values.flag(row.get("remapped_rows.pending")),
            failure=values.flag(row.get("remapped_rows.failure")),
        ),
        mig_mode_enabled=values.flag(row.get("mig.mode.current")),
        utilization_gpu_percent=values.number(row.get("utilization.gpu")),
        utilization_memory_percent=values.number(row.get("utilization.memory")),
        sm_clock_mhz=values.integer(row.get("clocks.current.sm") or row.get("clocks.sm")),
        sm_clock_max_mhz=values.integer(row.get("clocks.max.sm")),
        memory_clock_mhz=values.integer(row.get("clocks.current.memory") or row.get("clocks.mem")),
        memory_clock_max_mhz=values.integer(row.get("clocks.max.memory")),
        fan_speed_percent=values.number(row.get("fan.speed")),
        memory_temperature_c=values.number(row.get("temperature.memory")),
    )


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
                name=values.text(row.get("process_name")),
                kind="C",
                used_memory_bytes=values.size_bytes(row.get("used_gpu_memory")),
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
    return Machine(
        origin=Origin(kind="nvidia-smi-csv", path=path, detail="nvidia-smi --query-gpu"),
        driver=driver,
        gpus=gpus,
        probe_issues=recorded_only_issues("nvidia-smi --query-gpu", ("driver", "gpus")),
    )

"""`amd-smi metric --json` (and `static`/`list` output of the same shape) -> Machine.

amd-smi (ROCm 6.1 and newer) prints a list with one object per GPU, {"gpu": 0, "usage": {...},
"power": {...}, ...}; newer releases wrap the list as {"gpu_data": [...]}. A reading is either a
bare value or {"value": 10, "unit": "W"}; "N/A" means not supported. Only the sections present
are read, so `amd-smi metric -p --json` gives power alone. Names of the fields follow AMD's
amdsmi_cli (`metric`: usage.gfx_activity, power.socket_power, temperature.edge/hotspot/mem,
mem_usage.total_vram/used_vram in MB, i.e. MiB).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dlrig.machine.model import Gpu, Machine, Origin, Rocm
from dlrig.machine.readers.common import catalogue_id_for, parse_json, recorded_only_issues

COMMAND = "amd-smi metric --json"
# A list whose first object has a "gpu" key (watch mode puts "timestamp" first), or the
# {"gpu_data": [...]} wrapper of newer releases.
_OPENING = re.compile(r'^\s*(?:\[\s*\{[^{}\[\]]*?"gpu"\s*:|\{\s*"gpu_data"\s*:)')
_SIZE_UNITS = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30}


def looks_like(text: str) -> bool:
    return bool(_OPENING.match(text[:4096]))


def _value(raw: Any) -> tuple[float | None, str]:
    """(number, unit) of a reading: {"value": 10, "unit": "W"}, 10, "10 W" or "N/A"."""
    unit = ""
    if isinstance(raw, Mapping):
        unit = str(raw.get("unit") or "")
        raw = raw.get("value")
    if isinstance(raw, bool) or raw is None:
        return None, unit
    if isinstance(raw, int | float):
        return float(raw), unit
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)\s*(\S*)\s*$", str(raw))
    return (float(match.group(1)), match.group(2) or unit) if match else (None, unit)


def _section(gpu: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    section = gpu.get(name)
    return section if isinstance(section, Mapping) else {}


def _first(section: Mapping[str, Any], *names: str) -> float | None:
    for name in names:
        number, _ = _value(section.get(name))
        if number is not None:
            return number
    return None


def _bytes(section: Mapping[str, Any], name: str) -> int | None:
    number, unit = _value(section.get(name))
    if number is None:
        return None
    return round(number * _SIZE_UNITS.get(unit.upper() or "MB", 2**20))


def _gpu(position: int, raw: Mapping[str, Any]) -> Gpu:
    index = raw.get("gpu")
    index = index if isinstance(index, int) else position
    asic = _section(raw, "asic")
    name = str(asic.get("market_name") or "") or f"AMD GPU {index}"
    usage, power = _section(raw, "usage"), _section(raw, "power")
    temperature, memory = _section(raw, "temperature"), _section(raw, "mem_usage")
    edge, hotspot = _first(temperature, "edge"), _first(temperature, "hotspot")
    return Gpu(
        index=index,
        name=name,
        vendor="amd",
        gfx_target=str(asic.get("target_graphics_version") or "") or None,
        catalogue_id=catalogue_id_for(name),
        utilization_gpu_percent=_first(usage, "gfx_activity"),
        utilization_memory_percent=_first(usage, "umc_activity"),
        power_draw_watts=_first(
            power, "socket_power", "current_socket_power", "average_socket_power"
        ),
        temperature_c=edge if edge is not None else hotspot,
        temperature_edge_c=edge,
        temperature_junction_c=hotspot,
        memory_temperature_c=_first(temperature, "mem"),
        memory_total_bytes=_bytes(memory, "total_vram"),
        memory_used_bytes=_bytes(memory, "used_vram"),
    )


def read(text: str, path: str | None) -> Machine:
    document = parse_json(text)
    if isinstance(document, Mapping):
        document = document.get("gpu_data")
    if not isinstance(document, list) or not all(isinstance(g, Mapping) for g in document):
        raise ValueError("not a list of GPU objects")
    if not document:
        raise ValueError("no GPU in it")
    gpus = tuple(_gpu(position, raw) for position, raw in enumerate(document))
    return Machine(
        origin=Origin(kind="amd-smi-json", path=path, detail=COMMAND),
        gpus=gpus,
        rocm=Rocm(tool="amd-smi"),
        probe_issues=recorded_only_issues(COMMAND, ("gpus",)),
    )

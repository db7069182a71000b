"""`amd-smi metric --json` (and `static`/`list` output of the same shape) -> Machine.

amd-smi (ROCm 6.1 and newer) prints a list with one object per GPU, {"gpu": 0, "usage": {...},
"power": {...}, ...}; newer releases wrap the list as {"gpu_data": [...]}. A reading is either a
bare value or {"value": 10, "unit": "W"}; "N/A" means not supported. Only the sections present
are read, so `amd-smi metric -p --json` gives power alone. Names of the fields follow AMD's
amdsmi_cli (`metric`: usage.gfx_activity, power.socket_power, temperature.edge/hotspot/mem,
mem_usage.total_vram/used_vram in MB, i.e. MiB).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from dlrig.machine.model import EccCounts, Gpu, GpuProcess, Machine, Origin, PcieLink, Rocm
from dlrig.machine.readers import values
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
        # JSON allows what Python parses as inf or nan: no reading
        return (float(raw), unit) if math.isfinite(raw) else (None, unit)
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


def _integer(section: Mapping[str, Any], name: str) -> int | None:
    number = _first(section, name)
    return None if number is None else int(number)


def _gen(section: Mapping[str, Any], name: str) -> int | None:
    number, unit = _value(section.get(name))
    if number is None:
        return None
    if unit.upper() == "MT/S":  # some releases print the rate in MT/s
        number /= 1000
    return values.PCIE_GEN_BY_GTS.get(number)


def _pcie(bus: Mapping[str, Any], pcie: Mapping[str, Any]) -> PcieLink:
    """`static`'s bus section holds the link's maximum, `metric`'s pcie section what it runs at
    now (an idle Radeon drops to 2.5 GT/s x8 and climbs under load)."""
    return PcieLink(
        gen_current=_gen(pcie, "speed"),
        gen_max=_gen(bus, "max_pcie_speed"),
        width_current=_integer(pcie, "width"),
        width_max=_integer(bus, "max_pcie_width"),
    )


def _ecc_enabled(ras: Mapping[str, Any]) -> bool | None:
    """`static`'s ras.ecc_block_state: ECC is on where any block (UMC is the memory) says so."""
    states = ras.get("ecc_block_state")
    if not isinstance(states, Mapping) or not states:
        return None
    said = {values.flag(str(v)) for v in states.values()}
    if True in said:
        return True
    return False if said == {False} else None


def _processes(raw: Mapping[str, Any]) -> tuple[GpuProcess, ...] | None:
    """`amd-smi process --json`: process_list of {"process_info": {name, pid, memory_usage:
    {vram_mem, gtt_mem, cpu_mem}}}; "No running processes detected" (a string) is none."""
    listed = raw.get("process_list")
    if listed is None:
        return None
    out = []
    for entry in listed if isinstance(listed, list) else ():
        info = entry.get("process_info") if isinstance(entry, Mapping) else None
        if not isinstance(info, Mapping) or not isinstance(info.get("pid"), int):
            continue
        name = str(info.get("name") or "") or None
        used = _bytes(_section(info, "memory_usage"), "vram_mem")
        out.append(GpuProcess(pid=info["pid"], name=name, used_memory_bytes=used))
    return tuple(out)


def _gpu(position: int, raw: Mapping[str, Any]) -> Gpu:
    index = raw.get("gpu")
    index = index if isinstance(index, int) else position
    asic = _section(raw, "asic")
    name = str(asic.get("market_name") or "") or f"AMD GPU {index}"
    usage, power = _section(raw, "usage"), _section(raw, "power")
    temperature, memory = _section(raw, "temperature"), _section(raw, "mem_usage")
    edge, hotspot = _first(temperature, "edge"), _first(temperature, "hotspot")
    ecc, limit = _section(raw, "ecc"), _section(raw, "limit")
    # `metric` gives the VRAM in use (mem_usage), `static` its size (vram.size)
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
        memory_total_bytes=_bytes(memory, "total_vram") or _bytes(_section(raw, "vram"), "size"),
        memory_used_bytes=_bytes(memory, "used_vram"),
        # An APU (Strix Halo) reports its limits as 0 W: no cap it can state, not a 0 W cap.
        power_limit_watts=_first(limit, "socket_power", "max_power", "power_cap") or None,
        # `list` puts bdf and uuid at the top, `static` the bdf in its bus section
        pci_bus_id=values.json_text(raw.get("bdf"))
        or values.json_text(_section(raw, "bus").get("bdf")),
        uuid=values.json_text(raw.get("uuid")),
        pcie=_pcie(_section(raw, "bus"), _section(raw, "pcie")),
        pcie_replay_errors=_integer(_section(raw, "pcie"), "replay_count"),
        ecc_mode_enabled=_ecc_enabled(_section(raw, "ras")),
        processes=_processes(raw),
        # amd-smi's totals count since the driver loaded (the RAS EEPROM keeps bad pages, not
        # these counts): the same meaning as NVML's volatile counters
        ecc_errors=EccCounts(
            volatile_corrected=_integer(ecc, "total_correctable_count"),
            volatile_uncorrected=_integer(ecc, "total_uncorrectable_count"),
        ),
    )


def _driver(document: list[Mapping[str, Any]]) -> str | None:
    """The `driver` section's `version` in `static`: the amdgpu module's version ("6.16.6");
    an in-kernel driver reports the kernel's banner instead, which names no amdgpu release."""
    for raw in document:
        version = str(_section(raw, "driver").get("version") or "")
        if re.fullmatch(r"\d+\.\d+(\.\d+)*", version):
            return version
    return None


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
        rocm=Rocm(tool="amd-smi", amdgpu_driver_version=_driver(document)),
        probe_issues=recorded_only_issues(COMMAND, ("gpus",)),
    )

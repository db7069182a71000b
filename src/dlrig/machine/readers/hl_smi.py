"""Intel Gaudi's `hl-smi` -> Machine: its default table and `hl-smi -Q ... -f csv`.

The table mimics nvidia-smi's: a header with "HL-SMI Version: hl-1.20.0-fw-58.1.1.1" (the tools'
release and the firmware) and "Driver Version: 1.19.1-6f47ddd", two rows per device (AIP), then
the compute processes. The CSV is `hl-smi -Q <fields> -f csv[,noheader]`: with a header its
fields are named (nvidia-smi's style, "temperature.aip", "utilization.aip"); without one, the
field list all-smi and the Gaudi docs use is assumed (index, uuid, name, driver_version,
memory.total, memory.used, memory.free, power.draw, power.max, temperature.aip,
utilization.aip) and every line must fit it.
"""

from __future__ import annotations

import csv
import io
import re

from dlrig.machine.model import Gaudi, Gpu, GpuProcess, Machine, Origin, replace
from dlrig.machine.readers import values
from dlrig.machine.readers.common import catalogue_id_for, recorded_only_issues

TABLE_COMMAND = "hl-smi"
CSV_COMMAND = "hl-smi -Q ... -f csv"
_VERSION = re.compile(r"^\|\s*HL-SMI Version:\s*(\S+)", re.MULTILINE)
_DRIVER = re.compile(r"^\|\s*Driver Version:\s*(\S+)", re.MULTILINE)
_FIRST = re.compile(r"^\|\s*(\d+)\s+(HL-\S+)\s+\S+\s*\|\s*([0-9a-fA-F:.]+)\s+\S+\s*\|\s*(\S+)\s*\|")
_SECOND = re.compile(
    r"^\|\s*\S+\s+(?P<temp>\S+)\s+\S+\s+(?P<draw>\S+)\s*/\s*(?P<cap>\S+)\s*\|"
    r"\s*(?P<used>\d+)\s*MiB\s*/\s*(?P<total>\d+)\s*MiB\s*\|\s*(?P<util>\S+)"
)
_PROCESS = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+(\S+)\s+(.+?)\s+(\d+)\s*MiB")
_NOHEADER_FIELDS = (
    "index",
    "uuid",
    "name",
    "driver_version",
    "memory.total",
    "memory.used",
    "memory.free",
    "power.draw",
    "power.max",
    "temperature.aip",
    "utilization.aip",
)
_NOHEADER_LINE = re.compile(r"^\d+,\s*[^,]*,\s*HL-\w+,\s*[\w.\-]+,\s*\d+ MiB,")
_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")

# hl-smi's model numbers -> the product (all-smi's table; the Gaudi docs' device names).
_PRODUCTS = (("HL-325", "Intel Gaudi 3"), ("HL-225", "Intel Gaudi 2"), ("HL-205", "Intel Gaudi"))


def looks_like_table(text: str) -> bool:
    return bool(_VERSION.search(text[:4096]))


def looks_like_csv(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0]
    if _NOHEADER_LINE.match(first):
        return True
    header = [_UNIT.sub("", field).strip() for field in first.split(",")]
    return "name" in header and any(f.endswith(".aip") for f in header)


def _name(model: str) -> str:
    for prefix, product in _PRODUCTS:
        if model.startswith(prefix):
            return f"{product} ({model})"
    return f"Intel Gaudi ({model})"


def _gpu(index: int, model: str, **fields: object) -> Gpu:
    name = _name(model)
    catalogue_id = catalogue_id_for(model) or catalogue_id_for(name)
    gpu = Gpu(index=index, name=name, vendor="intel-gaudi", catalogue_id=catalogue_id)
    return replace(gpu, **fields)


def _table_gpus(lines: list[str]) -> tuple[Gpu, ...]:
    gpus: list[Gpu] = []
    for position, line in enumerate(lines):
        first = _FIRST.match(line)
        if not first:
            continue
        second = _SECOND.match(lines[position + 1]) if position + 1 < len(lines) else None
        if not second:
            raise ValueError(f"device {first.group(1)}: its second row is missing or cut")
        gpus.append(
            _gpu(
                int(first.group(1)),
                first.group(2),
                pci_bus_id=first.group(3),
                temperature_c=values.number(second["temp"]),
                power_draw_watts=values.number(second["draw"]),
                power_limit_watts=values.number(second["cap"]),
                memory_used_bytes=int(second["used"]) * 2**20,
                memory_total_bytes=int(second["total"]) * 2**20,
                utilization_gpu_percent=values.number(second["util"]),
            )
        )
    return tuple(gpus)


def _processes(lines: list[str], gpus: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
    start = next((i for i, line in enumerate(lines) if "Compute Processes" in line), None)
    if start is None:
        return gpus
    found: dict[int, list[GpuProcess]] = {g.index: [] for g in gpus}
    for line in lines[start:]:
        match = _PROCESS.match(line)
        if match and int(match.group(1)) in found:
            found[int(match.group(1))].append(
                GpuProcess(
                    pid=int(match.group(2)),
                    kind=match.group(3),
                    name=match.group(4).strip(),
                    used_memory_bytes=int(match.group(5)) * 2**20,
                )
            )
    return tuple(replace(g, processes=tuple(found[g.index])) for g in gpus)


def read_table(text: str, path: str | None) -> Machine:
    lines = text.splitlines()
    gpus = _table_gpus(lines)
    if not gpus:
        raise ValueError("no device rows under the header (is the table cut?)")
    version = _VERSION.search(text)
    driver = _DRIVER.search(text)
    return Machine(
        origin=Origin(kind="hl-smi", path=path, detail=TABLE_COMMAND),
        gpus=_processes(lines, gpus),
        gaudi=Gaudi(
            driver_version=driver.group(1) if driver else None,
            tool=version.group(1) if version else None,
        ),
        probe_issues=recorded_only_issues(TABLE_COMMAND, ("gpus",)),
    )


def read_csv(text: str, path: str | None) -> Machine:
    rows = [row for row in csv.reader(io.StringIO(text.strip()), skipinitialspace=True) if row]
    if _NOHEADER_LINE.match(text.lstrip()):
        header = list(_NOHEADER_FIELDS)
    else:
        header = [_UNIT.sub("", field).strip() for field in rows.pop(0)]
    gpus: list[Gpu] = []
    drivers = set()
    for number, row in enumerate(rows, start=1):
        if len(row) != len(header):
            raise ValueError(f"line {number} has {len(row)} fields, not {len(header)}")
        record = dict(zip(header, (value.strip() for value in row), strict=True))
        if record.get("driver_version"):
            drivers.add(record["driver_version"])
        gpus.append(
            _gpu(
                index if (index := values.integer(record.get("index"))) is not None else len(gpus),
                record.get("name") or "HL-?",
                uuid=values.text(record.get("uuid")),
                pci_bus_id=values.text(record.get("bus_id")),
                memory_total_bytes=values.size_bytes(record.get("memory.total")),
                memory_used_bytes=values.size_bytes(record.get("memory.used")),
                power_draw_watts=values.number(record.get("power.draw")),
                power_limit_watts=values.number(record.get("power.max")),
                temperature_c=values.number(record.get("temperature.aip")),
                utilization_gpu_percent=values.number(record.get("utilization.aip")),
            )
        )
    if not gpus:
        raise ValueError("no device lines")
    return Machine(
        origin=Origin(kind="hl-smi-csv", path=path, detail=CSV_COMMAND),
        gpus=tuple(gpus),
        gaudi=Gaudi(driver_version=sorted(drivers)[0] if len(drivers) == 1 else None),
        probe_issues=recorded_only_issues(CSV_COMMAND, ("gpus",)),
    )

"""The plain `nvidia-smi` table, the output people paste most -> Machine.

The layout changed across driver generations: 79 columns with two rows per GPU (R440), a third
row for the MIG mode (R450+), 89 columns (R530+), "Driver-Model" instead of "Persistence-M"
on Windows, process rows with or without GI/CI columns. The reader does not count columns: it
splits every row on its '|' borders and reads each cell by what it holds (a bus id, "34%",
"38C", "P8", "85W / 700W", "11MiB / 4040MiB", "0%", "Default"), so names truncated with
"...", "N/A" cells and wider layouts read the same.
"""

from __future__ import annotations

import re

from dlrig.machine.model import Driver, EccCounts, Gpu, GpuProcess, Machine, Origin
from dlrig.machine.readers import values
from dlrig.machine.readers.common import catalogue_id_for, recorded_only_issues

_HEADER = re.compile(
    r"^\s*\|\s*NVIDIA-SMI\s+(?P<smi>\S+)\s+Driver Version:\s*(?P<driver>\S+)"
    r"(?:\s+CUDA Version:\s*(?P<cuda>\S+))?",
    re.M,
)
_BUS_ID = re.compile(
    r"^(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s+(?P<disp>\S+)$"
)
_FIRST = re.compile(r"^(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<mode>On|Off|WDDM|TCC|MCDM|N/A)$")
_FAN = re.compile(r"(?P<fan>\d+|N/A)%?\s+(?P<temp>\d+C|N/A)\s+(?P<perf>P\d+|N/A)")
_POWER = re.compile(r"(?P<draw>\d+(?:\.\d+)?W|N/A)\s*/\s*(?P<cap>\d+(?:\.\d+)?W|N/A)")
_MEMORY = re.compile(r"(?P<used>\d+)\s*MiB\s*/\s*(?P<total>\d+)\s*MiB")
_UTIL = re.compile(r"^(?P<util>\d+%|N/A)\s+(?P<mode>[\w./]+)")
_PROCESS_SIZE = re.compile(r"^(?P<size>\d+)\s*MiB$")


def looks_like(text: str) -> bool:
    return bool(_HEADER.search(text[:20000]))


def _cells(line: str) -> list[str] | None:
    """The cells of a '| a | b | c |' row, stripped; None for borders and other lines."""
    stripped = line.strip()
    if not (stripped.startswith("|") and stripped.endswith("|")) or set(stripped) <= set("|=-+ "):
        return None
    return [cell.strip() for cell in stripped[1:-1].split("|")]


def _watts(raw: str | None) -> float | None:
    return values.number(raw.removesuffix("W")) if raw else None


def _gpu(first: list[str], second: list[str] | None, third: list[str] | None) -> Gpu | None:
    head = _FIRST.match(first[0])
    bus = _BUS_ID.match(first[1]) if len(first) > 1 else None
    if head is None or bus is None:
        return None
    name = head.group("name").strip()
    mode = head.group("mode")
    fields: dict[str, object] = {
        "index": int(head.group("index")),
        "name": name,
        "catalogue_id": catalogue_id_for(name.rstrip(". ")),
        "pci_bus_id": bus.group("bus"),
        # On/Off is the persistence mode; Windows prints the driver model in that column.
        "persistence_mode": {"On": True, "Off": False}.get(mode),
    }
    if len(first) > 2:
        ecc = values.integer(first[2])
        fields["ecc_errors"] = EccCounts(volatile_uncorrected=ecc)
    if second and len(second) >= 3:
        fan = _FAN.search(second[0])
        if fan:
            fields["fan_speed_percent"] = values.number(fan.group("fan"))
            fields["temperature_c"] = values.number(fan.group("temp").removesuffix("C"))
            fields["performance_state"] = values.text(fan.group("perf"))
        power = _POWER.search(second[0])
        if power:
            fields["power_draw_watts"] = _watts(values.text(power.group("draw")))
            fields["power_limit_watts"] = _watts(values.text(power.group("cap")))
        memory = _MEMORY.search(second[1])
        if memory:
            fields["memory_used_bytes"] = int(memory.group("used")) * 1024**2
            fields["memory_total_bytes"] = int(memory.group("total")) * 1024**2
        util = _UTIL.match(second[2])
        if util:
            fields["utilization_gpu_percent"] = values.number(util.group("util").rstrip("%"))
    if third and len(third) >= 3 and third[2]:
        fields["mig_mode_enabled"] = {"Enabled": True, "Disabled": False}.get(third[2])
    return Gpu(**fields)  # type: ignore[arg-type]


def _processes(lines: list[str], header_at: int) -> dict[int, list[GpuProcess]]:
    """Process rows by GPU index: 'GPU GI CI PID Type name mem' or the older 'GPU PID Type'."""
    with_instances = "GI" in lines[header_at + 1] if header_at + 1 < len(lines) else False
    found: dict[int, list[GpuProcess]] = {}
    for line in lines[header_at + 1 :]:
        cells = _cells(line)
        if cells is None or len(cells) != 1:
            if line.strip().startswith("+") and found:
                break
            continue
        words = cells[0].split()
        skip = 3 if with_instances else 1
        if len(words) < skip + 3 or not words[0].isdigit() or not words[skip].isdigit():
            continue
        size = _PROCESS_SIZE.match(words[-1])
        found.setdefault(int(words[0]), []).append(
            GpuProcess(
                pid=int(words[skip]),
                kind=words[skip + 1],
                name=" ".join(words[skip + 2 : -1]) or None,
                used_memory_bytes=int(size.group("size")) * 1024**2 if size else None,
                # "GI ID" and "CI ID" under MIG; "N/A" without it
                gpu_instance_id=int(words[1]) if with_instances and words[1].isdigit() else None,
                compute_instance_id=(
                    int(words[2]) if with_instances and words[2].isdigit() else None
                ),
            )
        )
    return found


def read(text: str, path: str | None) -> Machine:
    header = _HEADER.search(text)
    if header is None:
        raise ValueError("no 'NVIDIA-SMI ... Driver Version' header line")
    lines = text.splitlines()
    gpus: list[Gpu] = []
    process_header = next(
        (i for i, line in enumerate(lines) if re.match(r"^\s*\|\s*Processes:", line)), None
    )
    end = process_header if process_header is not None else len(lines)
    i = 0
    while i < end:
        cells = _cells(lines[i])
        if cells and len(cells) >= 2 and _BUS_ID.match(cells[1]):
            following = [_cells(lines[j]) for j in (i + 1, i + 2) if j < end]
            second = following[0] if following else None
            third = following[1] if len(following) > 1 else None
            if third is not None and third and third[0]:
                third = None  # the next GPU's first row, not a MIG-mode row (R440 layout)
            gpu = _gpu(cells, second, third)
            if gpu is not None:
                gpus.append(gpu)
        i += 1
    if not gpus:
        raise ValueError("the table lists no GPU rows")
    if process_header is not None:
        by_gpu = _processes(lines, process_header)
        gpus = [Gpu(**{**g.__dict__, "processes": tuple(by_gpu.get(g.index, ()))}) for g in gpus]
    driver = Driver(
        version=values.text(header.group("driver")),
        cuda_version=values.text(header.group("cuda")),
        kernel_module_loaded=True,
        nvidia_pci_devices=len(gpus),
    )
    return Machine(
        origin=Origin(kind="nvidia-smi-table", path=path, detail="nvidia-smi (default table)"),
        driver=driver,
        gpus=tuple(gpus),
        probe_issues=recorded_only_issues("nvidia-smi table", ("driver", "gpus")),
    )

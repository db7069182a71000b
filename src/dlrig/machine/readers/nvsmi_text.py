"""`nvidia-smi -q` (plain text) -> Machine.

The text is an indented tree of "Label : value" lines and bare section labels. Labels repeat
("MIG Device", "Process ID"), so the tree keeps them as ordered lists rather than dicts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from dlrig.machine.model import (
    Driver,
    EccCounts,
    Gpu,
    GpuProcess,
    Machine,
    MigDevice,
    Origin,
    PcieLink,
    RemappedRows,
    RetiredPages,
)
from dlrig.machine.readers import values
from dlrig.machine.readers.common import catalogue_id_for, recorded_only_issues

# nvidia-smi pads every label before its colon ("Bus Id      : 00000000:83:00.0"), so a colon
# without whitespace before it belongs to the text ("GPU 00000000:83:00.0" is a section label).
_LINE = re.compile(r"^(?P<indent>\s*)(?P<label>.+?)(?:\s+:\s?(?P<value>.*))?$")


@dataclass
class Node:
    label: str
    value: str | None = None
    children: list[Node] = field(default_factory=list)

    def child(self, *path: str) -> Node | None:
        node: Node | None = self
        for label in path:
            if node is None:
                return None
            node = next((c for c in node.children if c.label.lower() == label.lower()), None)
        return node

    def get(self, *path: str) -> str | None:
        node = self.child(*path)
        return None if node is None else node.value

    def all(self, label: str) -> list[Node]:
        return [c for c in self.children if c.label.lower() == label.lower()]


def parse_tree(text: str) -> Node:
    """The indentation tree of an `nvidia-smi -q` output."""
    root = Node("root")
    stack: list[tuple[int, Node]] = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip() or raw.strip().startswith("=") or raw.startswith("#"):
            continue
        match = _LINE.match(raw.rstrip())
        if not match:
            continue
        indent = len(match.group("indent").expandtabs(4))
        node = Node(match.group("label").strip(), match.group("value"))
        if node.value is not None:
            node.value = node.value.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1].children.append(node)
        stack.append((indent, node))
    return root


_CLOCK_REASON_NAMES = {
    "idle": "gpu_idle",
    "applications clocks setting": "applications_clocks_setting",
    "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown",
    "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown",
    "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown",
    "display clock setting": "display_clocks_setting",
}


def _walk(node: Node) -> list[Node]:
    found = []
    for child in node.children:
        found.append(child)
        found.extend(_walk(child))
    return found


def _clock_reasons(gpu: Node) -> tuple[str, ...] | None:
    node = gpu.child("Clocks Event Reasons") or gpu.child("Clocks Throttle Reasons")
    if node is None:
        return None
    active = []
    seen = False
    for child in _walk(node):
        state = values.flag(child.value)
        if state is None:
            continue
        seen = True
        if state:
            active.append(_CLOCK_REASON_NAMES.get(child.label.lower(), child.label.lower()))
    return tuple(active) if seen else None


def _sum(node: Node | None, prefixes: tuple[str, ...]) -> int | None:
    if node is None:
        return None
    total: int | None = None
    for child in node.children:
        if child.label.lower().startswith(prefixes):
            count = values.integer(child.value)
            if count is not None:
                total = (total or 0) + count
    return total


def _ecc(gpu: Node) -> EccCounts:
    errors = gpu.child("ECC Errors")
    if errors is None:
        return EccCounts()
    corrected = ("sram correctable", "dram correctable", "single bit")
    uncorrected = ("sram uncorrectable", "dram uncorrectable", "double bit")
    volatile, aggregate = errors.child("Volatile"), errors.child("Aggregate")
    return EccCounts(
        volatile_corrected=_sum(volatile, corrected),
        volatile_uncorrected=_sum(volatile, uncorrected),
        aggregate_corrected=_sum(aggregate, corrected),
        aggregate_uncorrected=_sum(aggregate, uncorrected),
    )


def _processes(gpu: Node) -> tuple[GpuProcess, ...] | None:
    node = gpu.child("Processes")
    if node is None:
        return None
    found = []
    for proc in node.all("Process ID"):
        pid = values.integer(proc.value)
        if pid is None:
            continue
        found.append(
            GpuProcess(
                pid=pid,
                name=values.text(proc.get("Name")),
                kind=values.text(proc.get("Type")),
                used_memory_bytes=values.size_bytes(proc.get("Used GPU Memory")),
            )
        )
    return tuple(found)


def _mig(gpu: Node) -> tuple[MigDevice, ...]:
    devices: list[MigDevice] = []
    for node in gpu.all("MIG Device"):
        index = values.integer(node.get("Index"))
        memory = node.child("Shared FB Memory Usage") or node.child("FB Memory Usage")
        devices.append(
            MigDevice(
                index=index if index is not None else len(devices),
                gpu_instance_id=values.integer(node.get("GPU Instance ID")),
                memory_total_bytes=values.size_bytes(memory.get("Total")) if memory else None,
                memory_used_bytes=values.size_bytes(memory.get("Used")) if memory else None,
                sm_count=values.integer(
                    node.get("Device Attributes", "Shared", "Multiprocessor count")
                ),
            )
        )
    return tuple(devices)


def gpu_from_node(index: int, gpu: Node) -> Gpu:
    name = values.text(gpu.get("Product Name")) or "unknown NVIDIA GPU"
    link = gpu.child("PCI", "GPU Link Info")
    gen_candidates = []
    if link is not None:
        for label in ("Max", "Device Max", "Host Max"):
            gen = values.integer(link.get("PCIe Generation", label))
            if gen is not None:
                gen_candidates.append(gen)
    power = gpu.child("GPU Power Readings") or gpu.child("Power Readings")
    remap = gpu.child("Remapped Rows")
    retired = gpu.child("Retired Pages")
    return Gpu(
        index=index,
        name=name,
        uuid=values.text(gpu.get("GPU UUID")),
        pci_bus_id=values.text(gpu.get("PCI", "Bus Id")) or gpu.label.removeprefix("GPU ").strip(),
        catalogue_id=catalogue_id_for(name),
        serial=values.text(gpu.get("Serial Number")),
        vbios_version=values.text(gpu.get("VBIOS Version")),
        memory_total_bytes=values.size_bytes(gpu.get("FB Memory Usage", "Total")),
        memory_used_bytes=values.size_bytes(gpu.get("FB Memory Usage", "Used")),
        pcie=PcieLink(
            gen_current=values.integer(link.get("PCIe Generation", "Current")) if link else None,
            gen_max=min(gen_candidates) if gen_candidates else None,
            width_current=values.link_width(link.get("Link Width", "Current")) if link else None,
            width_max=values.link_width(link.get("Link Width", "Max")) if link else None,
        ),
        persistence_mode=values.flag(gpu.get("Persistence Mode")),
        performance_state=values.text(gpu.get("Performance State")),
        power_draw_watts=values.number(
            (power.get("Power Draw") or power.get("Average Power Draw")) if power else None
        ),
        power_limit_watts=values.number(
            (power.get("Current Power Limit") or power.get("Power Limit")) if power else None
        ),
        power_default_limit_watts=values.number(
            power.get("Default Power Limit") if power else None
        ),
        temperature_c=values.number(gpu.get("Temperature", "GPU Current Temp")),
        clocks_event_reasons=_clock_reasons(gpu),
        ecc_mode_enabled=values.flag(gpu.get("ECC Mode", "Current")),
        ecc_mode_pending=values.flag(gpu.get("ECC Mode", "Pending")),
        ecc_errors=_ecc(gpu),
        retired_pages=RetiredPages(
            single_bit=values.integer(retired.get("Single Bit ECC")) if retired else None,
            double_bit=values.integer(retired.get("Double Bit ECC")) if retired else None,
            pending=values.flag(retired.get("Pending Page Blacklist")) if retired else None,
        ),
        remapped_rows=RemappedRows(
            correctable=values.integer(remap.get("Correctable Error")) if remap else None,
            uncorrectable=values.integer(remap.get("Uncorrectable Error")) if remap else None,
            pending=values.flag(remap.get("Pending")) if remap else None,
            failure=values.flag(remap.get("Remapping Failure Occurred")) if remap else None,
        ),
        mig_mode_enabled=values.flag(gpu.get("MIG Mode", "Current")),
        mig_devices=_mig(gpu),
        utilization_gpu_percent=values.number(gpu.get("Utilization", "GPU")),
        utilization_memory_percent=values.number(gpu.get("Utilization", "Memory")),
        sm_clock_mhz=values.integer(gpu.get("Clocks", "SM")),
        sm_clock_max_mhz=values.integer(gpu.get("Max Clocks", "SM")),
        processes=_processes(gpu),
        memory_clock_mhz=values.integer(gpu.get("Clocks", "Memory")),
        memory_clock_max_mhz=values.integer(gpu.get("Max Clocks", "Memory")),
        fan_speed_percent=values.number(gpu.get("Fan Speed")),
        memory_temperature_c=values.number(gpu.get("Temperature", "Memory Current Temp")),
        pcie_tx_bytes_per_second=values.byte_rate(gpu.get("PCI", "Tx Throughput")),
        pcie_rx_bytes_per_second=values.byte_rate(gpu.get("PCI", "Rx Throughput")),
        pcie_replay_errors=values.integer(gpu.get("PCI", "Replays Since Reset")),
    )


def parse(text: str) -> tuple[Driver, tuple[Gpu, ...], str | None]:
    """Driver, GPUs and timestamp of an `nvidia-smi -q` text."""
    tree = parse_tree(text)
    gpu_nodes = [n for n in tree.children if n.label.startswith("GPU ") and n.value is None]
    gpus = tuple(gpu_from_node(i, node) for i, node in enumerate(gpu_nodes))
    attached = values.integer(tree.get("Attached GPUs"))
    driver = Driver(
        version=values.text(tree.get("Driver Version")),
        cuda_version=values.text(tree.get("CUDA Version")),
        nvidia_pci_devices=attached if attached is not None else len(gpus),
        kernel_module_loaded=True,
    )
    return driver, gpus, values.text(tree.get("Timestamp"))


def looks_like(text: str) -> bool:
    return "==============NVSMI LOG==============" in text[:4096]


def read(text: str, path: str | None) -> Machine:
    driver, gpus, timestamp = parse(text)
    if not gpus and driver.version is None:
        raise ValueError("no GPU or driver section found in this nvidia-smi -q text")
    return Machine(
        origin=Origin(
            kind="nvidia-smi-text", path=path, collected_at=timestamp, detail="nvidia-smi -q"
        ),
        driver=driver,
        gpus=gpus,
        probe_issues=recorded_only_issues("nvidia-smi -q", ("driver", "gpus")),
    )

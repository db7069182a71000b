"""`nvidia-smi -q` (plain text) -> Machine.

The text is an indented tree of "Label : value" lines and bare section labels. Labels repeat
("MIG Device", "Process ID"), so the tree keeps them as ordered lists rather than dicts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from dlrig.machine.model import (
    Driver,
    EccCounts,
    Gpu,
    GpuProcess,
    Machine,
    MigDevice,
    RemappedRows,
    RetiredPages,
)
from dlrig.machine.readers import fields, values
from dlrig.machine.readers.common import catalogue_id_for, gpu_query_machine

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

    def at(self, path: tuple[str, ...]) -> str | None:
        """`get` with the labels as one tuple (how the field tables name them)."""
        return self.get(*path)

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


def _under(
    node: Node | None, readers: dict[str, fields.Read], labels: dict[str, str]
) -> dict[str, Any]:
    """The fields read from labels right under `node`; all None when the section is absent."""
    return fields.read(readers, labels, lambda label: node.get(label) if node else None)


_PROCESS_LABELS = {"name": "Name", "kind": "Type", "used_memory_bytes": "Used GPU Memory"}


def _processes(gpu: Node) -> tuple[GpuProcess, ...] | None:
    node = gpu.child("Processes")
    if node is None:
        return None
    found = []
    # Under MIG each "Process ID" is preceded, at its own level, by its GPU and compute
    # instance ("GPU instance ID : 2", "Compute instance ID : 0"); "N/A" without MIG.
    instance: dict[str, int | None] = {}
    for child in node.children:
        label = child.label.lower()
        if label in ("gpu instance id", "compute instance id"):
            instance[label] = values.integer(child.value)
            continue
        if label != "process id":
            continue
        pid = values.integer(child.value)
        if pid is None:
            continue
        found.append(
            GpuProcess(
                pid=pid,
                **_under(child, fields.PROCESS, _PROCESS_LABELS),
                gpu_instance_id=instance.pop("gpu instance id", None),
                compute_instance_id=instance.pop("compute instance id", None),
            )
        )
    return tuple(found)


_MIG_LABELS = {
    "gpu_instance_id": ("GPU Instance ID",),
    "sm_count": ("Device Attributes", "Shared", "Multiprocessor count"),
}
# Under "Shared FB Memory Usage" ("FB Memory Usage" on older drivers).
_MIG_MEMORY_LABELS = {"memory_total_bytes": "Total", "memory_used_bytes": "Used"}


def _mig(gpu: Node) -> tuple[MigDevice, ...]:
    devices: list[MigDevice] = []
    for node in gpu.all("MIG Device"):
        index = values.integer(node.get("Index"))
        memory = node.child("Shared FB Memory Usage") or node.child("FB Memory Usage")
        devices.append(
            MigDevice(
                index=index if index is not None else len(devices),
                **fields.read(fields.MIG_DEVICE, _MIG_LABELS, node.at),
                **_under(memory, fields.MIG_DEVICE, _MIG_MEMORY_LABELS),
            )
        )
    return tuple(devices)


# The label path under a GPU's section of each one-value Gpu field (fields.GPU says how its
# text is read).
_GPU_LABELS = {
    "uuid": ("GPU UUID",),
    "serial": ("Serial Number",),
    "vbios_version": ("VBIOS Version",),
    "memory_total_bytes": ("FB Memory Usage", "Total"),
    "memory_used_bytes": ("FB Memory Usage", "Used"),
    "persistence_mode": ("Persistence Mode",),
    "performance_state": ("Performance State",),
    "temperature_c": ("Temperature", "GPU Current Temp"),
    "ecc_mode_enabled": ("ECC Mode", "Current"),
    "ecc_mode_pending": ("ECC Mode", "Pending"),
    "mig_mode_enabled": ("MIG Mode", "Current"),
    "utilization_gpu_percent": ("Utilization", "GPU"),
    "utilization_memory_percent": ("Utilization", "Memory"),
    "utilization_encoder_percent": ("Utilization", "Encoder"),
    "utilization_decoder_percent": ("Utilization", "Decoder"),
    "sm_clock_mhz": ("Clocks", "SM"),
    "sm_clock_max_mhz": ("Max Clocks", "SM"),
    "memory_clock_mhz": ("Clocks", "Memory"),
    "memory_clock_max_mhz": ("Max Clocks", "Memory"),
    "fan_speed_percent": ("Fan Speed",),
    "memory_temperature_c": ("Temperature", "Memory Current Temp"),
    "pcie_tx_bytes_per_second": ("PCI", "Tx Throughput"),
    "pcie_rx_bytes_per_second": ("PCI", "Rx Throughput"),
    "pcie_replay_errors": ("PCI", "Replays Since Reset"),
}
_PCIE_LABELS = {
    "gen_current": ("PCIe Generation", "Current"),
    "width_current": ("Link Width", "Current"),
    "width_max": ("Link Width", "Max"),
}
_PCIE_GEN_MAXIMA = (
    ("PCIe Generation", "Max"),
    ("PCIe Generation", "Device Max"),
    ("PCIe Generation", "Host Max"),
)
# Under "GPU Power Readings" ("Power Readings" on older drivers): the first label with a value.
_POWER_LABELS = {
    "power_draw_watts": ("Power Draw", "Average Power Draw"),
    "power_limit_watts": ("Current Power Limit", "Power Limit"),
    "power_default_limit_watts": ("Default Power Limit",),
}
_RETIRED_LABELS = {
    "single_bit": "Single Bit ECC",
    "double_bit": "Double Bit ECC",
    "pending": "Pending Page Blacklist",
}
_REMAPPED_LABELS = {
    "correctable": "Correctable Error",
    "uncorrectable": "Uncorrectable Error",
    "pending": "Pending",
    "failure": "Remapping Failure Occurred",
}


def gpu_from_node(index: int, gpu: Node) -> Gpu:
    name = values.text(gpu.get("Product Name")) or "unknown NVIDIA GPU"
    link = gpu.child("PCI", "GPU Link Info")
    power = gpu.child("GPU Power Readings") or gpu.child("Power Readings")
    return Gpu(
        index=index,
        name=name,
        pci_bus_id=values.text(gpu.get("PCI", "Bus Id")) or gpu.label.removeprefix("GPU ").strip(),
        catalogue_id=catalogue_id_for(name),
        pcie=fields.pcie_link(
            _PCIE_LABELS, _PCIE_GEN_MAXIMA, lambda path: link.get(*path) if link else None
        ),
        clocks_event_reasons=_clock_reasons(gpu),
        ecc_errors=_ecc(gpu),
        retired_pages=RetiredPages(
            **_under(gpu.child("Retired Pages"), fields.RETIRED, _RETIRED_LABELS)
        ),
        remapped_rows=RemappedRows(
            **_under(gpu.child("Remapped Rows"), fields.REMAPPED, _REMAPPED_LABELS)
        ),
        mig_devices=_mig(gpu),
        processes=_processes(gpu),
        **fields.read(fields.GPU, _GPU_LABELS, gpu.at),
        **fields.read(
            fields.GPU,
            _POWER_LABELS,
            fields.first_found(lambda label: power.get(label) if power else None),
        ),
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
    return gpu_query_machine("nvidia-smi-text", "nvidia-smi -q", path, driver, gpus, timestamp)

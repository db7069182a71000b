"""A machine's facts as the page shows and compares them, from any document that holds a
machine snapshot (accept's doctor, doctor, a saved snapshot, bench)."""

from __future__ import annotations

from typing import Any


def machine_of(schema: str, document: dict[str, Any]) -> dict[str, Any] | None:
    if schema == "dlrig.machine":
        return document
    if schema == "dlrig.accept":
        return ((document.get("doctor") or {}).get("machine")) or None
    if schema in ("dlrig.doctor", "dlrig.bench"):
        machine = document.get("machine")
        return machine if isinstance(machine, dict) else None
    return None


def facts(machine: dict[str, Any]) -> dict[str, Any]:
    """Plain facts, None where the snapshot does not say."""
    origin = machine.get("origin") or {}
    os_info = machine.get("os") or {}
    cpu = machine.get("cpu") or {}
    memory = machine.get("memory") or {}
    driver = machine.get("driver") or {}
    frameworks = machine.get("frameworks") or {}
    torch = frameworks.get("torch") or {}
    gpus = []
    for gpu in machine.get("gpus") or ():
        pcie = gpu.get("pcie") or {}
        gpus.append(
            {
                "index": gpu.get("index"),
                "name": gpu.get("name"),
                "uuid": gpu.get("uuid"),
                "serial": gpu.get("serial"),
                "pci_bus_id": gpu.get("pci_bus_id"),
                "vbios_version": gpu.get("vbios_version"),
                "memory_total_bytes": gpu.get("memory_total_bytes"),
                "compute_capability": gpu.get("compute_capability"),
                "pcie_gen_max": pcie.get("gen_max"),
                "pcie_width_max": pcie.get("width_max"),
                "pcie_width_current": pcie.get("width_current"),
                "power_limit_watts": gpu.get("power_limit_watts"),
                "power_default_limit_watts": gpu.get("power_default_limit_watts"),
                "ecc_mode_enabled": gpu.get("ecc_mode_enabled"),
                "persistence_mode": gpu.get("persistence_mode"),
            }
        )
    return {
        "hostname": origin.get("hostname"),
        "collected_at": origin.get("collected_at"),
        "source": _source(origin),
        "os": os_info.get("name"),
        "kernel": os_info.get("kernel_release"),
        "cpu": cpu.get("model"),
        "cpu_cores": cpu.get("cores"),
        "cpu_threads": cpu.get("threads"),
        "memory_total_bytes": memory.get("total_bytes"),
        "driver_version": driver.get("version"),
        "driver_cuda_version": driver.get("cuda_version"),
        "torch_version": torch.get("version"),
        "torch_cuda_version": torch.get("cuda_version"),
        "nccl_version": torch.get("nccl_version"),
        "gpu_count": len(gpus),
        "gpus": gpus,
    }


def _source(origin: dict[str, Any]) -> str | None:
    kind = origin.get("kind")
    if not kind:
        return None
    return f"{kind} ({origin['path']})" if origin.get("path") else str(kind)


# What `--compare` looks at, with the words the page uses.
COMPARED = (
    ("driver_version", "NVIDIA driver"),
    ("driver_cuda_version", "CUDA supported by the driver"),
    ("kernel", "kernel"),
    ("os", "operating system"),
    ("torch_version", "PyTorch"),
    ("torch_cuda_version", "PyTorch's CUDA"),
    ("nccl_version", "NCCL"),
    ("gpu_count", "GPU count"),
    ("memory_total_bytes", "host memory"),
    ("cpu", "CPU"),
)
GPU_COMPARED = (
    ("name", "model"),
    ("vbios_version", "VBIOS"),
    ("pcie_width_current", "PCIe width"),
    ("power_limit_watts", "power limit"),
    ("memory_total_bytes", "memory"),
    ("serial", "serial number"),
)

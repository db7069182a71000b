"""NVIDIA driver, GPUs and topology of the live machine.

GPUs are read through NVML by `dlrig.machine.nvml_gpu`, the reader the monitor uses. Where NVML cannot be used but nvidia-smi runs (a broken Python
binding, say), the `nvidia-smi -q -x` reader fills in; where neither works, the reason is kept
and the PCI bus still tells whether NVIDIA hardware is present.
"""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from pathlib import Path

from dlrig.machine.model import Driver, Gpu, ProbeIssue, Topology
from dlrig.machine.nvml import NvmlSession, NvmlUnavailable, open_session
from dlrig.machine.nvml_gpu import nvlink_active_links, read_gpu, read_static
from dlrig.machine.nvml_source import cuda_version_text
from dlrig.machine.readers import nvsmi_xml
from dlrig.machine.readers.topology import topology as parse_topology
from dlrig.machine.runner import ProbeContext

_NVIDIA_VENDOR = "0x10de"
_GPU_CLASSES = ("0x0300", "0x0302")  # VGA controller, 3D controller
_MODULE_VERSION = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)")


def pci_devices(ctx: ProbeContext) -> tuple[int, int]:
    """(NVIDIA GPUs on the PCI bus, of which bound to the nvidia driver)."""
    total = bound = 0
    for device in ctx.path("/sys/bus/pci/devices").glob("*"):
        try:
            vendor = (device / "vendor").read_text().strip()
            device_class = (device / "class").read_text().strip()
        except OSError:
            continue
        if vendor != _NVIDIA_VENDOR or not device_class.startswith(_GPU_CLASSES):
            continue
        total += 1
        driver_link = device / "driver"
        if driver_link.exists() and Path(driver_link.resolve()).name == "nvidia":
            bound += 1
    return total, bound


def kernel_module_version(ctx: ProbeContext) -> str | None:
    text = ctx.read("/proc/driver/nvidia/version")
    if not text:
        return None
    match = _MODULE_VERSION.search(text)
    return match.group(1) if match else None


def _gpus(nv: NvmlSession, count: int) -> tuple[tuple[Gpu, ...], tuple[int, ...] | None]:
    """Every GPU through the monitor's own reader, and the active NVLinks of each (None when
    no GPU answers for its links: PCIe cards, MIG mode)."""
    gpus = []
    links: list[int | None] = []
    for index in range(count):
        handle = nv.get("nvmlDeviceGetHandleByIndex", index)
        static = read_static(nv, handle, index)
        # A snapshot does not wait 2 x 20 ms a GPU for PCIe throughput samples.
        gpus.append(read_gpu(nv, handle, index, static=static, pcie_throughput=False))
        links.append(nvlink_active_links(nv, handle, static.nvlink_links))
    known = any(n is not None for n in links)
    return tuple(gpus), (tuple(n or 0 for n in links) if known else None)


def probe(
    ctx: ProbeContext,
) -> tuple[Driver, tuple[Gpu, ...] | None, Topology | None, list[ProbeIssue]]:
    issues: list[ProbeIssue] = []
    total, bound = pci_devices(ctx)
    module_version = kernel_module_version(ctx)
    module_loaded = ctx.path("/sys/module/nvidia").exists() or module_version is not None
    base = Driver(
        kernel_module_version=module_version,
        nvidia_pci_devices=total,
        nvidia_pci_devices_with_driver=bound,
        kernel_module_loaded=module_loaded,
    )
    if ctx.root != Path("/"):
        return base, None, None, [ProbeIssue("gpus", "NVML is only read on the live machine")]
    try:
        with open_session() as nv:
            count = nv.get("nvmlDeviceGetCount") or 0
            gpus, links = _gpus(nv, count)
            cuda = nv.first(("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"))
            driver = dataclasses.replace(
                base,
                version=nv.get("nvmlSystemGetDriverVersion"),
                cuda_version=cuda_version_text(cuda),
            )
            for error in nv.errors[:5]:
                issues.append(ProbeIssue("gpus", f"NVML: {error}"))
    except NvmlUnavailable as exc:
        reason = str(exc)
        # "Driver/library version mismatch" and friends are findings, keep the exact text.
        driver = dataclasses.replace(base, nvml_error=reason)
        fallback = _from_nvidia_smi(ctx, driver)
        if fallback is None:
            issues.append(ProbeIssue("gpus", f"NVML unavailable: {reason}"))
            return driver, (() if total == 0 else None), None, issues
        driver, gpus = fallback
        links = None
    topo = None
    if len(gpus) > 1:
        result = ctx.runner.run(["nvidia-smi", "topo", "-m"], ctx.timeout_s)
        topo = parse_topology(result.stdout if result.ok else None, None)
        if topo is not None and links is not None:
            topo = Topology(labels=topo.labels, matrix=topo.matrix, nvlink_active_links=links)
        elif topo is None and links is not None:
            topo = Topology(nvlink_active_links=links)
        if not result.ok:
            issues.append(
                ProbeIssue(
                    "topology", f"nvidia-smi topo -m: {result.error or result.stderr.strip()}"
                )
            )
    return driver, gpus, topo, issues


def _from_nvidia_smi(ctx: ProbeContext, driver: Driver) -> tuple[Driver, tuple[Gpu, ...]] | None:
    result = ctx.runner.run(["nvidia-smi", "-q", "-x"], ctx.timeout_s)
    if not result.ok:
        return None
    try:
        root = ET.fromstring(result.stdout)
    except ET.ParseError:
        return None
    parsed_driver, gpus, _ = nvsmi_xml.parse_root(root)
    found = dataclasses.replace(
        driver, version=parsed_driver.version, cuda_version=parsed_driver.cuda_version
    )
    return found, gpus

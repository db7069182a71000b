"""NVIDIA driver, GPUs and topology of the live machine.

GPUs are read through NVML. Where NVML cannot be used but nvidia-smi runs (a broken Python
binding, say), the `nvidia-smi -q -x` reader fills in; where neither works, the reason is kept
and the PCI bus still tells whether NVIDIA hardware is present.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from dlrig.machine.model import (
    Driver,
    EccCounts,
    Gpu,
    GpuProcess,
    MigDevice,
    PcieLink,
    ProbeIssue,
    RemappedRows,
    RetiredPages,
    Topology,
)
from dlrig.machine.nvml import NvmlSession, NvmlUnavailable, clock_event_names, open_session
from dlrig.machine.processes import container_of_pid, holds_nvidia_device
from dlrig.machine.readers import nvsmi_xml
from dlrig.machine.readers.common import catalogue_id_for
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


def _cuda_version(value: int | None) -> str | None:
    if not value:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def memory_info(nv: NvmlSession, handle: Any) -> Any:
    """Memory use as nvidia-smi shows it: the v2 call leaves the driver's reservation out of
    "used" (v1 counts it on R510+ drivers); older drivers only have v1."""
    version = getattr(nv.nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            answer = nv.get("nvmlDeviceGetMemoryInfo", handle, version)
        except TypeError:  # a binding without the version argument
            answer = None
        if answer is not None:
            return answer
    return nv.get("nvmlDeviceGetMemoryInfo", handle)


def running_processes(nv: NvmlSession, handle: Any) -> tuple[GpuProcess, ...] | None:
    """Compute and graphics processes on the GPU, with their container when they run in one."""
    found: dict[int, GpuProcess] = {}
    seen_any = False
    for kind, functions in (
        ("C", ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses")),
        (
            "G",
            ("nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses"),
        ),
    ):
        processes = nv.first(functions, handle)
        if processes is None:
            continue
        seen_any = True
        for proc in processes:
            pid = int(proc.pid)
            used = getattr(proc, "usedGpuMemory", None)
            previous = found.get(pid)
            # The PID is the host's; name it only when it is the same process here.
            here = holds_nvidia_device(pid) is not False
            container, pod = container_of_pid(pid) if here else (None, None)
            found[pid] = GpuProcess(
                pid=pid,
                name=_process_name(pid) if here else None,
                kind="C+G" if previous is not None and previous.kind != kind else kind,
                used_memory_bytes=int(used) if isinstance(used, int) else None,
                container_id=container,
                kubernetes_pod_uid=pod,
            )
    return tuple(found.values()) if seen_any else None


def memory_health(nv: NvmlSession, handle: Any) -> tuple[EccCounts, RetiredPages, RemappedRows]:
    """ECC error counters, retired pages (before Ampere) and remapped rows (Ampere and newer)."""
    nvml = nv.nvml

    def ecc(error_type: int, counter: int) -> int | None:
        value = nv.get("nvmlDeviceGetTotalEccErrors", handle, error_type, counter)
        return int(value) if value is not None else None

    def retired(cause: int) -> int | None:
        pages = nv.get("nvmlDeviceGetRetiredPages", handle, cause)
        return len(pages) if pages is not None else None

    pending = nv.get("nvmlDeviceGetRetiredPagesPendingStatus", handle)
    remapped = nv.get("nvmlDeviceGetRemappedRows", handle)
    corrected = nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
    uncorrected = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    return (
        EccCounts(
            volatile_corrected=ecc(corrected, nvml.NVML_VOLATILE_ECC),
            volatile_uncorrected=ecc(uncorrected, nvml.NVML_VOLATILE_ECC),
            aggregate_corrected=ecc(corrected, nvml.NVML_AGGREGATE_ECC),
            aggregate_uncorrected=ecc(uncorrected, nvml.NVML_AGGREGATE_ECC),
        ),
        RetiredPages(
            single_bit=retired(nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
            double_bit=retired(nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
            pending=None if pending is None else pending == 1,
        ),
        RemappedRows(
            correctable=remapped[0] if remapped else None,
            uncorrectable=remapped[1] if remapped else None,
            pending=bool(remapped[2]) if remapped else None,
            failure=bool(remapped[3]) if remapped else None,
        ),
    )


def _process_name(pid: int) -> str | None:
    try:
        import psutil

        return str(psutil.Process(pid).name())
    except Exception:  # noqa: BLE001 - another container's pid, or it exited: no name is data
        return None


def _gpu(nv: NvmlSession, index: int) -> Gpu:
    handle = nv.get("nvmlDeviceGetHandleByIndex", index)
    name = nv.get("nvmlDeviceGetName", handle) or "unknown NVIDIA GPU"
    memory = memory_info(nv, handle)
    capability = nv.get("nvmlDeviceGetCudaComputeCapability", handle)
    pci = nv.get("nvmlDeviceGetPciInfo", handle)
    bus_id = getattr(pci, "busId", None) if pci is not None else None
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode()
    gen_max_candidates = [
        g
        for g in (
            nv.get("nvmlDeviceGetMaxPcieLinkGeneration", handle),
            nv.get("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
        )
        if g
    ]
    reasons = nv.first(
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        handle,
    )
    ecc_mode = nv.get("nvmlDeviceGetEccMode", handle)
    mig_mode = nv.get("nvmlDeviceGetMigMode", handle)
    utilization = nv.get("nvmlDeviceGetUtilizationRates", handle)
    power_mw = nv.get("nvmlDeviceGetPowerUsage", handle)
    limit_mw = nv.get("nvmlDeviceGetEnforcedPowerLimit", handle)
    default_mw = nv.get("nvmlDeviceGetPowerManagementDefaultLimit", handle)
    persistence = nv.get("nvmlDeviceGetPersistenceMode", handle)
    pstate = nv.get("nvmlDeviceGetPerformanceState", handle)
    nvml = nv.nvml

    ecc_errors, retired_pages, remapped_rows = memory_health(nv, handle)
    mig_devices = []
    if mig_mode is not None and mig_mode[0] == 1:
        for mig_index in range(nv.get("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
            mig_handle = nv.get("nvmlDeviceGetMigDeviceHandleByIndex", handle, mig_index)
            if mig_handle is None:
                continue
            mig_memory = nv.get("nvmlDeviceGetMemoryInfo", mig_handle)
            mig_devices.append(
                MigDevice(
                    index=mig_index,
                    profile=None,
                    memory_total_bytes=int(mig_memory.total) if mig_memory else None,
                    memory_used_bytes=int(mig_memory.used) if mig_memory else None,
                )
            )
    return Gpu(
        index=index,
        name=name,
        uuid=nv.get("nvmlDeviceGetUUID", handle),
        pci_bus_id=bus_id,
        catalogue_id=catalogue_id_for(name),
        serial=nv.get("nvmlDeviceGetSerial", handle),
        vbios_version=nv.get("nvmlDeviceGetVbiosVersion", handle),
        memory_total_bytes=int(memory.total) if memory else None,
        memory_used_bytes=int(memory.used) if memory else None,
        compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
        pcie=PcieLink(
            gen_current=nv.get("nvmlDeviceGetCurrPcieLinkGeneration", handle),
            gen_max=min(gen_max_candidates) if gen_max_candidates else None,
            width_current=nv.get("nvmlDeviceGetCurrPcieLinkWidth", handle),
            width_max=nv.get("nvmlDeviceGetMaxPcieLinkWidth", handle),
        ),
        persistence_mode=None if persistence is None else persistence == 1,
        performance_state=f"P{pstate}" if pstate is not None else None,
        power_draw_watts=power_mw / 1000 if power_mw is not None else None,
        power_limit_watts=limit_mw / 1000 if limit_mw is not None else None,
        power_default_limit_watts=default_mw / 1000 if default_mw is not None else None,
        temperature_c=nv.get("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU),
        temperature_slowdown_c=nv.get(
            "nvmlDeviceGetTemperatureThreshold", handle, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        clocks_event_reasons=clock_event_names(int(reasons)) if reasons is not None else None,
        ecc_mode_enabled=None if ecc_mode is None else ecc_mode[0] == 1,
        ecc_mode_pending=None if ecc_mode is None else ecc_mode[1] == 1,
        ecc_errors=ecc_errors,
        retired_pages=retired_pages,
        remapped_rows=remapped_rows,
        mig_mode_enabled=None if mig_mode is None else mig_mode[0] == 1,
        mig_devices=tuple(mig_devices),
        utilization_gpu_percent=float(utilization.gpu) if utilization else None,
        utilization_memory_percent=float(utilization.memory) if utilization else None,
        sm_clock_mhz=nv.get("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM),
        sm_clock_max_mhz=nv.get("nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_SM),
        processes=running_processes(nv, handle),
    )


def _nvlink_active(nv: NvmlSession, count: int) -> tuple[int, ...] | None:
    result = []
    any_answer = False
    for index in range(count):
        handle = nv.get("nvmlDeviceGetHandleByIndex", index)
        active = 0
        for link in range(getattr(nv.nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            state = nv.get("nvmlDeviceGetNvLinkState", handle, link)
            if state is None:
                continue
            any_answer = True
            active += 1 if state == 1 else 0
        result.append(active)
    return tuple(result) if any_answer else None


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
            gpus = tuple(_gpu(nv, index) for index in range(count))
            driver = Driver(
                version=nv.get("nvmlSystemGetDriverVersion"),
                cuda_version=_cuda_version(
                    nv.first(
                        ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion")
                    )
                ),
                kernel_module_version=module_version,
                nvidia_pci_devices=total,
                nvidia_pci_devices_with_driver=bound,
                kernel_module_loaded=module_loaded,
            )
            links = _nvlink_active(nv, count) if count > 1 else None
            for error in nv.errors[:5]:
                issues.append(ProbeIssue("gpus", f"NVML: {error}"))
    except NvmlUnavailable as exc:
        reason = str(exc)
        # "Driver/library version mismatch" and friends are findings, keep the exact text.
        driver = Driver(
            nvml_error=reason,
            kernel_module_version=module_version,
            nvidia_pci_devices=total,
            nvidia_pci_devices_with_driver=bound,
            kernel_module_loaded=module_loaded,
        )
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
    return (
        Driver(
            version=parsed_driver.version,
            cuda_version=parsed_driver.cuda_version,
            kernel_module_version=driver.kernel_module_version,
            nvml_error=driver.nvml_error,
            nvidia_pci_devices=driver.nvidia_pci_devices,
            nvidia_pci_devices_with_driver=driver.nvidia_pci_devices_with_driver,
            kernel_module_loaded=driver.kernel_module_loaded,
        ),
        gpus,
    )

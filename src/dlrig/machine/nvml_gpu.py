"""One GPU read through NVML into a `Gpu`: the one reader `doctor` and `monitor` both use.

`read_static` reads what does not change while the driver is loaded (identity, limits, maxima,
how many NVLinks the device has); `read_gpu` adds the current readings. The monitor keeps the
static part and calls `read_gpu` every second; doctor reads both once. Every call goes through
`NvmlSession.get`, so a counter a GPU lacks is None, not an error.

The `nvidia-smi` equivalents: `nvidia-smi -q -i N` shows the same fields, `nvidia-smi nvlink -s`
the links, `nvidia-smi mig -lgi` the MIG instances.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from dlrig.machine.model import (
    EccCounts,
    Gpu,
    GpuProcess,
    MigDevice,
    PcieLink,
    RemappedRows,
    RetiredPages,
)
from dlrig.machine.nvml import NvmlSession, clock_event_names, field_number
from dlrig.machine.processes import container_of_pid, holds_nvidia_device
from dlrig.machine.readers.common import catalogue_id_for


@dataclass(frozen=True)
class StaticPart:
    """What one GPU says once: the `Gpu` with its fixed fields, and its NVLink count."""

    gpu: Gpu
    nvlink_links: int  # links the device has; 0 where it has none or NVML cannot say


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


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


def nvlink_link_count(nv: NvmlSession, handle: Any) -> int:
    """How many NVLinks the device has, as NCCL asks: the NVML_FI_DEV_NVLINK_LINK_COUNT field;
    where a driver does not answer it, the links in order until the first NVML refuses (NVML
    answers NOT_SUPPORTED for a device without NVLink, INVALID_ARGUMENT past its last link)."""
    field = getattr(nv.nvml, "NVML_FI_DEV_NVLINK_LINK_COUNT", None)
    if field is not None:
        answers = nv.field_values(handle, [field])
        count = field_number(answers[0]) if answers else None
        if count is not None:
            return max(int(count), 0)
    count = 0
    for link in range(int(nv.nvml.NVML_NVLINK_MAX_LINKS)):
        if nv.get("nvmlDeviceGetNvLinkState", handle, link) is None:
            break
        count = link + 1
    return count


def nvlink_active_links(nv: NvmlSession, handle: Any, links: int) -> int | None:
    """Active links among the device's `links`; None when NVML answers for none of them (a
    MIG-mode GPU: "Nvlink queries are not supported for Devices in MIG mode")."""
    states = [nv.get("nvmlDeviceGetNvLinkState", handle, link) for link in range(links)]
    answered = [state for state in states if state is not None]
    return sum(1 for state in answered if state == 1) if answered else None


def _nvlink_bytes(nv: NvmlSession, handle: Any, links: int) -> tuple[int | None, int | None]:
    """Data sent and received over all links since the driver loaded (the counters are KiB)."""
    tx_id = getattr(nv.nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)
    rx_id = getattr(nv.nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None)
    if not links or tx_id is None or rx_id is None:
        return None, None
    request = [(tx_id, link) for link in range(links)] + [(rx_id, link) for link in range(links)]
    answers = nv.field_values(handle, request)
    if not answers:
        return None, None
    totals: list[int | None] = [None, None]
    for position, answer in enumerate(answers):
        kib = field_number(answer)
        if kib is not None:
            side = 0 if position < links else 1
            totals[side] = (totals[side] or 0) + int(kib) * 1024
    return totals[0], totals[1]


def running_processes(nv: NvmlSession, handle: Any) -> tuple[GpuProcess, ...] | None:
    """Compute and graphics processes on the GPU, with their container when they run in one."""
    found: dict[int, GpuProcess] = {}
    seen_any = False
    listed: list[tuple[str, Any]] = []
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
        listed += [(kind, proc) for proc in processes]
    # Asked only when something runs: an idle GPU has no samples ("Not Found").
    use = process_utilisation(nv, handle) if listed else {}
    for kind, proc in listed:
        pid = int(proc.pid)
        used = getattr(proc, "usedGpuMemory", None)
        previous = found.get(pid)
        # The PID is the host's; name it only when it is the same process here.
        here = holds_nvidia_device(pid) is not False
        container, pod = container_of_pid(pid) if here else (None, None)
        sm, enc, dec = use.get(pid, (None, None, None))
        found[pid] = GpuProcess(
            pid=pid,
            name=_process_name(pid) if here else None,
            kind="C+G" if previous is not None and previous.kind != kind else kind,
            used_memory_bytes=int(used) if isinstance(used, int) else None,
            container_id=container,
            kubernetes_pod_uid=pod,
            gpu_instance_id=_instance_id(getattr(proc, "gpuInstanceId", None)),
            compute_instance_id=_instance_id(getattr(proc, "computeInstanceId", None)),
            sm_percent=sm,
            encoder_percent=enc,
            decoder_percent=dec,
        )
    return tuple(found.values()) if seen_any else None


def _instance_id(value: object) -> int | None:
    # 0xFFFFFFFF (NVML's "invalid") outside MIG; older structs have no such field.
    return value if isinstance(value, int) and 0 <= value < 0xFFFFFFFF else None


PROCESS_SAMPLE_WINDOW_S = 5.0


def process_utilisation(
    nv: NvmlSession, handle: Any, now_unix: float | None = None
) -> dict[int, tuple[float | None, float | None, float | None]]:
    """pid -> (SM %, encoder %, decoder %) from NVML's most recent per-process sample.

    The driver keeps a short buffer of samples; those newer than the window are asked for, and
    each process's latest one is kept, as `nvidia-smi pmon` shows it. No sample (an idle
    process, an old driver) is no entry."""
    since = int(((time.time() if now_unix is None else now_unix) - PROCESS_SAMPLE_WINDOW_S) * 1e6)
    ask = getattr(nv.nvml, "nvmlDeviceGetProcessUtilization", None)
    if ask is None:
        return {}
    try:
        samples = ask(handle, max(since, 0))
    except nv.nvml.NVMLError:  # NOT_FOUND: no sample in the window; an old driver: none at all
        return {}
    latest: dict[int, Any] = {}
    for sample in samples or ():
        pid = int(sample.pid)
        if pid not in latest or int(sample.timeStamp) >= int(latest[pid].timeStamp):
            latest[pid] = sample
    return {pid: (float(s.smUtil), float(s.encUtil), float(s.decUtil)) for pid, s in latest.items()}


def _process_name(pid: int) -> str | None:
    try:
        import psutil

        return str(psutil.Process(pid).name())
    except Exception:  # noqa: BLE001 - another container's pid, or it exited: no name is data
        return None


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


def mig_devices(nv: NvmlSession, handle: Any) -> tuple[MigDevice, ...]:
    """The MIG instances of a GPU in MIG mode (`nvidia-smi mig -lgi` lists the same)."""
    devices = []
    for mig_index in range(nv.get("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
        mig = nv.get("nvmlDeviceGetMigDeviceHandleByIndex", handle, mig_index)
        if mig is None:
            continue  # an unused slot: MIG devices need not be numbered densely
        memory = nv.get("nvmlDeviceGetMemoryInfo", mig)
        name = nv.get("nvmlDeviceGetName", mig) or ""
        attributes = nv.first(("nvmlDeviceGetAttributes_v2", "nvmlDeviceGetAttributes"), mig)
        # MIG device names end in the profile: "NVIDIA H100 80GB HBM3 MIG 3g.40gb".
        profile = name.rsplit("MIG ", 1)[1].strip() if "MIG " in name else None
        sm_count = getattr(attributes, "multiprocessorCount", None)
        devices.append(
            MigDevice(
                index=mig_index,
                profile=profile,
                gpu_instance_id=nv.get("nvmlDeviceGetGpuInstanceId", mig),
                memory_total_bytes=int(memory.total) if memory else None,
                memory_used_bytes=int(memory.used) if memory else None,
                sm_count=int(sm_count) if sm_count is not None else None,
            )
        )
    return tuple(devices)


def read_static(nv: NvmlSession, handle: Any, index: int) -> StaticPart:
    """Identity, limits and maxima: they do not change while the driver is loaded."""
    nvml = nv.nvml
    name = nv.get("nvmlDeviceGetName", handle) or "unknown NVIDIA GPU"
    pci = nv.get("nvmlDeviceGetPciInfo", handle)
    capability = nv.get("nvmlDeviceGetCudaComputeCapability", handle)
    memory = memory_info(nv, handle)
    # The link's maximum is the lower of the GPU's and the slot's.
    gen_max = [
        g
        for g in (
            nv.get("nvmlDeviceGetMaxPcieLinkGeneration", handle),
            nv.get("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
        )
        if g
    ]
    default_mw = nv.get("nvmlDeviceGetPowerManagementDefaultLimit", handle)
    gpu = Gpu(
        index=index,
        name=name,
        uuid=nv.get("nvmlDeviceGetUUID", handle),
        pci_bus_id=_text(getattr(pci, "busId", None)) if pci is not None else None,
        catalogue_id=catalogue_id_for(name),
        serial=nv.get("nvmlDeviceGetSerial", handle),
        vbios_version=nv.get("nvmlDeviceGetVbiosVersion", handle),
        memory_total_bytes=int(memory.total) if memory else None,
        compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
        pcie=PcieLink(
            gen_max=min(gen_max) if gen_max else None,
            width_max=nv.get("nvmlDeviceGetMaxPcieLinkWidth", handle),
        ),
        power_default_limit_watts=default_mw / 1000 if default_mw is not None else None,
        temperature_slowdown_c=nv.get(
            "nvmlDeviceGetTemperatureThreshold", handle, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        ),
        sm_clock_max_mhz=nv.get("nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_SM),
        memory_clock_max_mhz=nv.get("nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_MEM),
    )
    return StaticPart(gpu=gpu, nvlink_links=nvlink_link_count(nv, handle))


def read_gpu(
    nv: NvmlSession,
    handle: Any,
    index: int,
    static: StaticPart | None = None,
    pcie_throughput: bool = True,
) -> Gpu:
    """The GPU now: `static` (read when not given) with every current reading on top.

    `pcie_throughput=False` skips the two PCIe throughput calls, which NVML answers by sampling
    the link for 20 ms each: worth it every second in the monitor, not in a one-off snapshot.
    """
    nvml = nv.nvml
    static = static or read_static(nv, handle, index)
    base = static.gpu
    memory = memory_info(nv, handle)
    utilization = nv.get("nvmlDeviceGetUtilizationRates", handle)
    reasons = nv.first(
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        handle,
    )
    power_mw = nv.get("nvmlDeviceGetPowerUsage", handle)
    limit_mw = nv.get("nvmlDeviceGetEnforcedPowerLimit", handle)
    energy_mj = nv.get("nvmlDeviceGetTotalEnergyConsumption", handle)
    pstate = nv.get("nvmlDeviceGetPerformanceState", handle)
    persistence = nv.get("nvmlDeviceGetPersistenceMode", handle)
    ecc_mode = nv.get("nvmlDeviceGetEccMode", handle)
    mig_mode = nv.get("nvmlDeviceGetMigMode", handle)
    memory_temp = _memory_temperature(nv, handle)
    tx_kb = rx_kb = None
    if pcie_throughput:
        # NVML reports PCIe throughput in KB/s (1000 bytes) averaged over 20 ms.
        tx_kb = nv.get("nvmlDeviceGetPcieThroughput", handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
        rx_kb = nv.get("nvmlDeviceGetPcieThroughput", handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
    ecc_errors, retired_pages, remapped_rows = memory_health(nv, handle)
    nvlink_tx, nvlink_rx = _nvlink_bytes(nv, handle, static.nvlink_links)
    mig_on = None if mig_mode is None else mig_mode[0] == 1
    return dataclasses.replace(
        base,
        memory_used_bytes=int(memory.used) if memory else None,
        pcie=dataclasses.replace(
            base.pcie,
            gen_current=nv.get("nvmlDeviceGetCurrPcieLinkGeneration", handle),
            width_current=nv.get("nvmlDeviceGetCurrPcieLinkWidth", handle),
        ),
        persistence_mode=None if persistence is None else persistence == 1,
        performance_state=f"P{pstate}" if pstate is not None else None,
        power_draw_watts=power_mw / 1000 if power_mw is not None else None,
        power_limit_watts=limit_mw / 1000 if limit_mw is not None else None,
        temperature_c=nv.get("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU),
        memory_temperature_c=memory_temp,
        clocks_event_reasons=clock_event_names(int(reasons)) if reasons is not None else None,
        ecc_mode_enabled=None if ecc_mode is None else ecc_mode[0] == 1,
        ecc_mode_pending=None if ecc_mode is None else ecc_mode[1] == 1,
        ecc_errors=ecc_errors,
        retired_pages=retired_pages,
        remapped_rows=remapped_rows,
        mig_mode_enabled=mig_on,
        mig_devices=mig_devices(nv, handle) if mig_on else (),
        utilization_gpu_percent=float(utilization.gpu) if utilization else None,
        utilization_memory_percent=float(utilization.memory) if utilization else None,
        utilization_encoder_percent=_engine(nv, handle, "nvmlDeviceGetEncoderUtilization"),
        utilization_decoder_percent=_engine(nv, handle, "nvmlDeviceGetDecoderUtilization"),
        sm_clock_mhz=nv.get("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM),
        memory_clock_mhz=nv.get("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_MEM),
        fan_speed_percent=_float(nv.get("nvmlDeviceGetFanSpeed", handle)),
        energy_consumed_joules=energy_mj / 1000 if energy_mj is not None else None,
        pcie_tx_bytes_per_second=tx_kb * 1000.0 if tx_kb is not None else None,
        pcie_rx_bytes_per_second=rx_kb * 1000.0 if rx_kb is not None else None,
        pcie_replay_errors=nv.get("nvmlDeviceGetPcieReplayCounter", handle),
        nvlink_tx_bytes=nvlink_tx,
        nvlink_rx_bytes=nvlink_rx,
        processes=running_processes(nv, handle),
    )


def _memory_temperature(nv: NvmlSession, handle: Any) -> float | None:
    field = getattr(nv.nvml, "NVML_FI_DEV_MEMORY_TEMP", None)
    answers = nv.field_values(handle, [field]) if field is not None else None
    value = field_number(answers[0]) if answers else None
    return value if value else None  # 0 is what GPUs without an HBM sensor report


def _float(value: Any) -> float | None:
    return float(value) if value is not None else None


def _engine(nv: Any, handle: Any, call: str) -> float | None:
    """A video engine's utilisation: NVML answers [percent, sampling period in µs]."""
    answer = nv.get(call, handle)
    if answer is None:
        return None
    try:
        return float(answer[0])
    except (TypeError, ValueError, IndexError):
        return None

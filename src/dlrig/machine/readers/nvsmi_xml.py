"""`nvidia-smi -q -x` XML -> Machine (GPU and driver sections only).

Element names changed over driver releases (DTD v11 -> v12 -> v13): `clocks_throttle_reasons`
became `clocks_event_reasons`, `power_readings` became `gpu_power_readings`, ECC counters went
from single/double bit to sram/dram, `remapped_rows` grew from "N/A" to a structure. This reader
accepts all of them and maps missing or N/A values to None.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from functools import partial

from dlrig.machine.model import (
    Driver,
    EccCounts,
    Gpu,
    GpuProcess,
    Machine,
    MigDevice,
    PcieLink,
    ProbeIssue,
    RemappedRows,
    RetiredPages,
)
from dlrig.machine.readers import fields, values
from dlrig.machine.readers.common import catalogue_id_for, gpu_query_machine


def _find(node: ET.Element | None, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    return found.text


def _first(node: ET.Element, *paths: str) -> str | None:
    for path in paths:
        value = _find(node, path)
        if values.text(value) is not None:
            return value
    return None


def _sum_counts(node: ET.Element | None, names: tuple[str, ...]) -> int | None:
    """Sum the counters that exist; None when none of them has a value."""
    if node is None:
        return None
    total: int | None = None
    for name in names:
        count = values.integer(_find(node, name))
        if count is not None:
            total = (total or 0) + count
    return total


_CORRECTED = ("single_bit/total", "sram_correctable", "dram_correctable")
_UNCORRECTED = (
    "double_bit/total",
    "sram_uncorrectable",
    "sram_uncorrectable_parity",
    "sram_uncorrectable_secded",
    "dram_uncorrectable",
)


def _ecc(gpu: ET.Element) -> EccCounts:
    errors = gpu.find("ecc_errors")
    if errors is None:
        return EccCounts()
    volatile = errors.find("volatile")
    aggregate = errors.find("aggregate")
    return EccCounts(
        volatile_corrected=_sum_counts(volatile, _CORRECTED),
        volatile_uncorrected=_sum_counts(volatile, _UNCORRECTED),
        aggregate_corrected=_sum_counts(aggregate, _CORRECTED),
        aggregate_uncorrected=_sum_counts(aggregate, _UNCORRECTED),
    )


_RETIRED_PATHS = {
    "single_bit": "multiple_single_bit_retirement/retired_count",
    "double_bit": "double_bit_retirement/retired_count",
}


def _retired(gpu: ET.Element) -> RetiredPages:
    node = gpu.find("retired_pages")
    if node is None:
        return RetiredPages()
    pending = values.flag(_find(node, "pending_retirement"))
    blacklist = values.flag(_find(node, "pending_blacklist"))
    return RetiredPages(
        pending=None if pending is None and blacklist is None else bool(pending or blacklist),
        **fields.read(fields.RETIRED, _RETIRED_PATHS, partial(_find, node)),
    )


_REMAPPED_PATHS = {
    "correctable": "remapped_row_corr",
    "uncorrectable": "remapped_row_unc",
    "pending": "remapped_row_pending",
    "failure": "remapped_row_failure",
}


def _remapped(gpu: ET.Element) -> RemappedRows:
    node = gpu.find("remapped_rows")
    if node is None or len(node) == 0:
        return RemappedRows()
    return RemappedRows(**fields.read(fields.REMAPPED, _REMAPPED_PATHS, partial(_find, node)))


def _clock_reasons(gpu: ET.Element) -> tuple[str, ...] | None:
    node = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if node is None:
        node = gpu.find("clocks_throttle_reasons")
        prefix = "clocks_throttle_reason_"
    if node is None:
        return None
    active = []
    seen_any = False
    for child in node:
        state = values.flag(child.text)
        if state is None:
            continue
        seen_any = True
        if state:
            active.append(child.tag.removeprefix(prefix))
    return tuple(active) if seen_any else None


_PCIE_PATHS = {
    "gen_current": "pcie_gen/current_link_gen",
    "width_current": "link_widths/current_link_width",
    "width_max": "link_widths/max_link_width",
}
_PCIE_GEN_MAXIMA = (
    "pcie_gen/max_link_gen",
    "pcie_gen/max_host_link_gen",
    "pcie_gen/max_device_link_gen",
)


def _pcie(gpu: ET.Element) -> PcieLink:
    link = gpu.find("pci/pci_gpu_link_info")
    if link is None:
        return PcieLink()
    return fields.pcie_link(_PCIE_PATHS, _PCIE_GEN_MAXIMA, partial(_find, link))


_MIG_PATHS = {
    "gpu_instance_id": "gpu_instance_id",
    "memory_total_bytes": "fb_memory_usage/total",
    "memory_used_bytes": "fb_memory_usage/used",
    "sm_count": "device_attributes/shared/multiprocessor_count",
}


def _mig_devices(gpu: ET.Element) -> tuple[MigDevice, ...]:
    devices: list[MigDevice] = []
    for node in gpu.findall("mig_devices/mig_device"):
        index = values.integer(_find(node, "index"))
        devices.append(
            MigDevice(
                index=index if index is not None else len(devices),
                **fields.read(fields.MIG_DEVICE, _MIG_PATHS, partial(_find, node)),
            )
        )
    return tuple(devices)


_PROCESS_PATHS = {
    "name": "process_name",
    "kind": "type",
    "used_memory_bytes": "used_memory",
    "gpu_instance_id": "gpu_instance_id",
    "compute_instance_id": "compute_instance_id",
}


def _processes(gpu: ET.Element) -> tuple[GpuProcess, ...] | None:
    node = gpu.find("processes")
    if node is None:
        return None
    found = []
    for proc in node.findall("process_info"):
        pid = values.integer(_find(proc, "pid"))
        if pid is None:
            continue
        found.append(
            GpuProcess(
                pid=pid,
                **fields.read(fields.PROCESS, _PROCESS_PATHS, partial(_find, proc)),
            )
        )
    return tuple(found)


# Where each one-value Gpu field stands under <gpu> (fields.GPU says how its text is read).
_GPU_PATHS = {
    "uuid": "uuid",
    "serial": "serial",
    "vbios_version": "vbios_version",
    "memory_total_bytes": "fb_memory_usage/total",
    "memory_used_bytes": "fb_memory_usage/used",
    "compute_capability": "compute_cap",
    "persistence_mode": "persistence_mode",
    "performance_state": "performance_state",
    "temperature_c": "temperature/gpu_temp",
    "temperature_slowdown_c": "temperature/gpu_temp_slow_threshold",
    "ecc_mode_enabled": "ecc_mode/current_ecc",
    "ecc_mode_pending": "ecc_mode/pending_ecc",
    "mig_mode_enabled": "mig_mode/current_mig",
    "utilization_gpu_percent": "utilization/gpu_util",
    "utilization_memory_percent": "utilization/memory_util",
    "utilization_encoder_percent": "utilization/encoder_util",
    "utilization_decoder_percent": "utilization/decoder_util",
    "sm_clock_mhz": "clocks/sm_clock",
    "sm_clock_max_mhz": "max_clocks/sm_clock",
    "memory_clock_mhz": "clocks/mem_clock",
    "memory_clock_max_mhz": "max_clocks/mem_clock",
    "fan_speed_percent": "fan_speed",
    "memory_temperature_c": "temperature/memory_temp",
    "pcie_tx_bytes_per_second": "pci/tx_util",
    "pcie_rx_bytes_per_second": "pci/rx_util",
    "pcie_replay_errors": "pci/replay_counter",
}

# Power readings, under <gpu_power_readings> (<power_readings> before DTD v12): the first of
# each element list that has a value.
_POWER_PATHS = {
    "power_draw_watts": ("power_draw", "instant_power_draw", "average_power_draw"),
    "power_limit_watts": ("current_power_limit", "enforced_power_limit", "power_limit"),
    "power_default_limit_watts": ("default_power_limit",),
}


def _gpu(index: int, node: ET.Element) -> Gpu:
    name = values.text(_find(node, "product_name")) or "unknown NVIDIA GPU"
    power = node.find("gpu_power_readings")
    if power is None:
        power = node.find("power_readings")
    power_fields = (
        {}
        if power is None
        else fields.read(fields.GPU, _POWER_PATHS, lambda paths: _first(power, *paths))
    )
    return Gpu(
        index=index,
        name=name,
        pci_bus_id=values.text(_find(node, "pci/pci_bus_id")) or node.get("id"),
        catalogue_id=catalogue_id_for(name),
        pcie=_pcie(node),
        clocks_event_reasons=_clock_reasons(node),
        ecc_errors=_ecc(node),
        retired_pages=_retired(node),
        remapped_rows=_remapped(node),
        mig_devices=_mig_devices(node),
        processes=_processes(node),
        **fields.read(fields.GPU, _GPU_PATHS, partial(_find, node)),
        **power_fields,
    )


def parse_root(root: ET.Element) -> tuple[Driver, tuple[Gpu, ...], list[ProbeIssue]]:
    """The driver and GPU facts of a parsed `nvidia_smi_log` element."""
    issues: list[ProbeIssue] = []
    gpus = tuple(_gpu(i, node) for i, node in enumerate(root.findall("gpu")))
    attached = values.integer(_find(root, "attached_gpus"))
    if attached is not None and attached != len(gpus):
        issues.append(
            ProbeIssue(
                "gpus",
                f"the document says {attached} GPUs are attached but describes {len(gpus)}",
            )
        )
    driver = Driver(
        version=values.text(_find(root, "driver_version")),
        cuda_version=values.text(_find(root, "cuda_version")),
        nvidia_pci_devices=attached if attached is not None else len(gpus),
        kernel_module_loaded=True,
    )
    return driver, gpus, issues


def looks_like(text: str) -> bool:
    head = text.lstrip()[:4096]
    return head.startswith("<?xml") or "<nvidia_smi_log" in head


def read(text: str, path: str | None) -> Machine:
    """Parse the XML text; raises ValueError with a short reason when it is not one."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ValueError(f"the XML is not well-formed ({exc})") from None
    if root.tag != "nvidia_smi_log":
        raise ValueError(f"the XML root is <{root.tag}>, not <nvidia_smi_log>")
    driver, gpus, issues = parse_root(root)
    return gpu_query_machine(
        "nvidia-smi-xml",
        "nvidia-smi -q -x",
        path,
        driver,
        gpus,
        collected_at=values.text(_find(root, "timestamp")),
        issues=tuple(issues),
    )

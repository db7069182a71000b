"""The faults that take a node out of service, judged from a machine snapshot alone.

Only a fault of the node drains it: a hardware Xid (severity "critical" in NVIDIA's catalogue,
`knowledge/data/xid.csv`), uncorrectable ECC errors, a page retirement or row remap pending or
failed, a GPU missing from the bus, a driver whose kernel module and libraries differ, a PCIe link
below its width. An application's Xid (13, 31, 43: "restart the application") and every warning
are reported and never drain. After a job (`epilog`), GPU memory still held by processes is a
fault too: the next job would not get it.

Pure functions of plain data: the snapshot, the options and the state of the last check.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dlrig.knowledge import gpus as gpu_knowledge  # the catalogue: loaded once, on demand
from dlrig.knowledge import xid as xid_knowledge
from dlrig.machine.model import Gpu, Machine, XidEvent
from dlrig.report import Finding, Status, gpu_subject

# Memory a GPU holds with nothing running on it: the driver's own few hundred MiB.
LEAKED_BYTES = 1 << 30


@dataclass(frozen=True, kw_only=True)
class Fault(Finding):
    """One thing found wrong: a failure drains the node (takes it out of service), a warning
    only says so. `id` is the check ("gpu.xid", "gpu.ecc", ...), `gpu` the GPU it is about."""

    gpu: int | None = None

    @classmethod
    def of(
        cls,
        check: str,
        title: str,
        evidence: tuple[str, ...] = (),
        drain: bool = True,
        cause: str | None = None,
        gpu: int | None = None,
    ) -> Fault:
        return cls(
            id=check,
            status=Status.FAIL if drain else Status.WARN,
            title=title,
            source="health",
            evidence=tuple(evidence),
            cause=cause,
            gpu=gpu,
            subject=gpu_subject(gpu),
        )

    @property
    def check(self) -> str:
        return self.id

    @property
    def drain(self) -> bool:
        """Whether it takes the node out of service."""
        return self.status is Status.FAIL

    def to_dict(self) -> dict[str, object]:
        return {
            "check": self.check,
            "title": self.title,
            "evidence": list(self.evidence),
            "drain": self.drain,
            "cause": self.cause,
            "gpu": self.gpu,
        }


def event_key(event: XidEvent) -> str:
    """What tells one kernel-log event from another across checks."""
    return f"{event.timestamp or ''}|{event.code}|{event.pci_bus_id or ''}|{event.message or ''}"


def xid_faults(events: Iterable[XidEvent]) -> list[Fault]:
    """One fault per Xid code: critical ones drain, the rest are reported."""
    by_code: dict[int, list[XidEvent]] = {}
    for event in events:
        by_code.setdefault(event.code, []).append(event)
    faults = []
    for code, found in sorted(by_code.items()):
        info = xid_knowledge.lookup(code)
        severity = info.severity if info else "warn"
        where = sorted({e.pci_bus_id for e in found if e.pci_bus_id})
        name = info.name if info else "not in the Xid table"
        evidence = tuple(
            f"Xid {code} at {e.pci_bus_id or '?'}: {e.message or ''}".strip() for e in found[:3]
        )
        faults.append(
            Fault.of(
                "gpu.xid",
                f"Xid {code} ({name}) x{len(found)}" + (f" on {', '.join(where)}" if where else ""),
                evidence,
                drain=severity == "critical",
                cause="gpu_fell_off_bus" if code == 79 else "xid_error",
            )
        )
    return faults


def _label(gpu: Gpu) -> str:
    return f"GPU {gpu.index}" + (f" ({gpu.pci_bus_id})" if gpu.pci_bus_id else "")


def gpu_faults(machine: Machine, expect_gpus: int | None, busy_percent: float) -> list[Fault]:
    faults: list[Fault] = []
    gpus = machine.gpus or ()
    if expect_gpus is not None and len(gpus) < expect_gpus:
        faults.append(
            Fault.of(
                "gpu.count",
                f"{len(gpus)} of {expect_gpus} GPUs visible",
                ("nvidia-smi -L lists the GPUs the driver sees",),
                cause="gpu_fell_off_bus",
            )
        )
    for gpu in gpus:
        ecc = gpu.ecc_errors.volatile_uncorrected
        if ecc:
            faults.append(
                Fault.of(
                    "gpu.ecc",
                    f"{_label(gpu)}: {ecc} uncorrectable ECC error(s) since the driver loaded",
                    ("nvidia-smi -q -d ECC",),
                    cause="gpu_ecc_error",
                    gpu=gpu.index,
                )
            )
        if gpu.retired_pages.pending:
            faults.append(
                Fault.of(
                    "gpu.retired_pages",
                    f"{_label(gpu)}: page retirement pending (reset the GPU to apply it)",
                    ("nvidia-smi -q -d PAGE_RETIREMENT",),
                    cause="gpu_ecc_error",
                    gpu=gpu.index,
                )
            )
        rows = gpu.remapped_rows
        if rows.failure or rows.pending:
            what = "failed" if rows.failure else "pending (reset the GPU to apply it)"
            faults.append(
                Fault.of(
                    "gpu.row_remap",
                    f"{_label(gpu)}: row remapping {what}",
                    ("nvidia-smi -q -d ROW_REMAPPER",),
                    cause="gpu_ecc_error",
                    gpu=gpu.index,
                )
            )
        link = gpu.pcie
        busy = (gpu.utilization_gpu_percent or 0) >= busy_percent
        if link.width_current and link.width_max and link.width_current < link.width_max:
            # Judged on a busy GPU: some boards narrow an idle link to save power, and a link
            # that trained narrow under load is the fault (a half-seated card, a riser).
            faults.append(
                Fault.of(
                    "gpu.pcie_width",
                    f"{_label(gpu)}: PCIe x{link.width_current} of x{link.width_max}"
                    + ("" if busy else " (idle: judged again under load)"),
                    (
                        "nvidia-smi --query-gpu=index,utilization.gpu,pcie.link.width.current,"
                        "pcie.link.width.max --format=csv",
                    ),
                    drain=busy,
                    cause="pcie_link_degraded",
                    gpu=gpu.index,
                )
            )
        if busy and link.gen_current and link.gen_max and link.gen_current < link.gen_max:
            # Idle links drop to Gen1 by design: only a busy one below its rating is a fault.
            faults.append(
                Fault.of(
                    "gpu.pcie_gen",
                    f"{_label(gpu)}: busy at PCIe Gen{link.gen_current} of Gen{link.gen_max}",
                    (f"utilisation {gpu.utilization_gpu_percent:.0f}%",),
                    cause="pcie_link_degraded",
                    gpu=gpu.index,
                )
            )
    return faults


def driver_faults(machine: Machine) -> list[Fault]:
    """A kernel module and user-space libraries of different versions (NVML says "Driver/library
    version mismatch"), or GPUs on the PCI bus that the driver does not present."""
    faults = []
    driver = machine.driver
    texts = [driver.nvml_error] if driver and driver.nvml_error else []
    texts += [f"{i.source}: {i.reason}" for i in machine.probe_issues]
    for text in texts:
        if "mismatch" in text.lower():
            faults.append(
                Fault.of(
                    "driver.mismatch",
                    "NVIDIA kernel module and libraries differ (reboot to load the new module)",
                    (text,),
                    cause="driver_library_mismatch",
                )
            )
            break
    on_bus = driver.nvidia_pci_devices if driver else None
    seen = len(machine.gpus) if machine.gpus is not None else None
    if on_bus is not None and seen is not None and seen < on_bus:
        faults.append(
            Fault.of(
                "gpu.count",
                f"{on_bus} NVIDIA GPU(s) on the PCI bus, {seen} answer the driver",
                ("lspci -d 10de:  and  nvidia-smi -L",),
                cause="gpu_fell_off_bus",
            )
        )
    return faults


def leaked_memory_faults(machine: Machine) -> list[Fault]:
    """After a job: processes still on a GPU, or memory held with none listed."""
    faults = []
    for gpu in machine.gpus or ():
        compute = [p for p in gpu.processes or () if p.kind != "G"]
        if compute:
            listed = ", ".join(f"{p.name or '?'} (pid {p.pid})" for p in compute[:4])
            faults.append(
                Fault.of(
                    "gpu.stray_processes",
                    f"{_label(gpu)}: {len(compute)} process(es) still on the GPU after the job",
                    (listed,),
                    cause=None,
                    gpu=gpu.index,
                )
            )
        elif (gpu.memory_used_bytes or 0) > LEAKED_BYTES and gpu.processes is not None:
            faults.append(
                Fault.of(
                    "gpu.leaked_memory",
                    f"{_label(gpu)}: {(gpu.memory_used_bytes or 0) / 2**30:.1f} GiB held with no "
                    "process on it",
                    ("nvidia-smi --query-gpu=index,memory.used --format=csv",),
                    cause=None,
                    gpu=gpu.index,
                )
            )
    return faults


def _has_nvlink(gpu: Gpu) -> bool:
    spec = gpu_knowledge.catalogue().resolve(gpu.name)
    return bool(spec and spec.form_factor in {"sxm", "oam", "mezzanine"} and spec.nvlink_gbs)


def fabric_faults(machine: Machine) -> list[Fault]:
    """SXM GPUs of a multi-GPU board with no active NVLink: on an HGX board that is the fabric
    manager down (or out of step with the driver); CUDA then fails or runs over PCIe."""
    gpus = machine.gpus or ()
    links = machine.topology.nvlink_active_links if machine.topology else None
    if len(gpus) < 2 or links is None:
        return []
    down = [g for g in gpus if _has_nvlink(g) and g.index < len(links) and links[g.index] == 0]
    if not down:
        return []
    return [
        Fault.of(
            "gpu.nvlink",
            f"{len(down)} NVLink GPU(s) with no active link (is nvidia-fabricmanager running?)",
            (
                "nvidia-smi nvlink -s ; systemctl status nvidia-fabricmanager",
                ", ".join(_label(g) for g in down[:4]),
            ),
            cause=None,
        )
    ]

"""Several recorded files of one machine -> one Machine (`doctor --from A --from B`).

A collect_env paste knows the frameworks, an `nvidia-smi -q -x` the GPUs' health, a dmesg log
the Xid events: each fills what the others lack. Sections are merged field by field, the
richer source first; GPUs are matched by PCI bus id, then UUID, then index, so the XML's
readings and the paste's compute-capability warning end up on the same GPU.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dlrig.errors import InputError
from dlrig.machine.model import Gpu, KernelLog, Machine, Origin, ProbeIssue
from dlrig.machine.readers import values

# Which recorded source to believe first when two disagree: the richest per section.
_RANK = {
    "snapshot": 0,
    "nvidia-smi-xml": 1,
    "nvidia-smi-text": 2,
    "nvidia-smi-capture": 3,
    "nvidia-smi-csv": 4,
    "nvidia-smi-table": 5,
    "collect-env": 6,
    "kernel-log": 7,
}


def _rank(machine: Machine) -> int:
    return _RANK.get(machine.origin.kind, 8)


def _merge_values(first: Any, second: Any) -> Any:
    """Field by field for dataclasses: the first's value unless it is None."""
    if first is None:
        return second
    if second is None or not dataclasses.is_dataclass(first) or type(first) is not type(second):
        return first
    changes = {}
    for f in dataclasses.fields(first):
        mine, theirs = getattr(first, f.name), getattr(second, f.name)
        if mine is None or (mine == () and theirs):
            changes[f.name] = theirs
        elif dataclasses.is_dataclass(mine) and dataclasses.is_dataclass(theirs):
            changes[f.name] = _merge_values(mine, theirs)
    return dataclasses.replace(first, **changes) if changes else first  # type: ignore[type-var]


def _bus(gpu: Gpu) -> str | None:
    """ "00000000:83:00.0" and "0000:83:00.0" name the same device."""
    return values.pci_address(gpu.pci_bus_id)


def _same(a: Gpu, b: Gpu) -> bool:
    if _bus(a) and _bus(b):
        return _bus(a) == _bus(b)
    if a.uuid and b.uuid:
        return a.uuid == b.uuid
    return a.index == b.index


def _same_model(a: Gpu, b: Gpu) -> bool:
    """Names that can be the same GPU: equal catalogue ids, or one a prefix of the other
    (nvidia-smi's table truncates "NVIDIA GeForce RTX 2080 ...")."""
    if a.catalogue_id and b.catalogue_id:
        return a.catalogue_id == b.catalogue_id
    if a.vendor == "amd" and b.vendor == "amd":
        # rocm-smi and torch name one card differently ("Radeon RX 6700/6700 XT / 6800M" vs
        # "Radeon RX 6700 XT", or only a PCI id on ROCm 4.3): the ISA is what identifies it.
        targets = {g.gfx_target.split(":")[0] for g in (a, b) if g.gfx_target}
        if len(targets) == 2:
            return False
        if targets or any(g.name.startswith("AMD GPU ") for g in (a, b)):
            return True
    left, right = (g.name.lower().rstrip(". ").strip() for g in (a, b))
    return left.startswith(right) or right.startswith(left)


def _merge_gpus(
    first: tuple[Gpu, ...] | None, second: tuple[Gpu, ...] | None, issues: list[ProbeIssue]
) -> tuple[Gpu, ...] | None:
    if not first or not second:
        return first or second
    merged = []
    for gpu in first:
        match = next((other for other in second if _same(gpu, other)), None)
        if match is not None and not _same_model(gpu, match):
            # Two files of different machines: keep the richer file's GPU, say so.
            issues.append(
                ProbeIssue(
                    "gpus", f"the files disagree on GPU {gpu.index}: {gpu.name} vs {match.name}"
                )
            )
            match = None
        merged.append(_merge_values(gpu, match) if match is not None else gpu)
    return tuple(merged)


def _slot(bus_id: str | None) -> str | None:
    """ "00000000:83:00.0", "0000:83:00.0" and the kernel log's "0000:83:00" name one slot."""
    if not bus_id:
        return None
    parts = bus_id.lower().split(".")[0].split(":")
    if len(parts) < 3:
        return None
    try:
        return f"{int(parts[-3], 16):x}:{int(parts[-2], 16):02x}:{int(parts[-1], 16):02x}"
    except ValueError:
        return None


def _label(machine: Machine) -> str:
    return machine.origin.path or machine.origin.kind


def disagreements(first: Machine, other: Machine) -> list[str]:
    """What shows that two recordings are of different machines (empty: nothing does)."""
    found = []
    hosts = (first.origin.hostname, other.origin.hostname)
    if all(hosts) and hosts[0] != hosts[1]:
        found.append(f"host {hosts[0]} vs {hosts[1]}")
    drivers = tuple(m.driver.version if m.driver else None for m in (first, other))
    if all(drivers) and drivers[0] != drivers[1]:
        found.append(f"driver {drivers[0]} vs {drivers[1]}")
    gpus = (first.gpus or (), other.gpus or ())
    if gpus[0] and gpus[1]:
        slots = [{s for g in side if (s := _slot(g.pci_bus_id))} for side in gpus]
        uuids = [{g.uuid for g in side if g.uuid} for side in gpus]
        if all(slots) and not slots[0] & slots[1]:
            found.append(
                "GPUs at PCI " + ", ".join(sorted(slots[0])) + " vs " + ", ".join(sorted(slots[1]))
            )
        elif all(uuids) and not uuids[0] & uuids[1]:
            found.append("GPU UUIDs differ")
        else:
            for gpu in gpus[0]:
                match = next((o for o in gpus[1] if _same(gpu, o)), None)
                if match is not None and not _same_model(gpu, match):
                    found.append(f"GPU {gpu.index} is {gpu.name} vs {match.name}")
                    break
    for log_side, gpu_side in ((first, other), (other, first)):
        if log_side.kernel_log is None or not gpu_side.gpus:
            continue
        known = {_slot(g.pci_bus_id) for g in gpu_side.gpus}
        if None in known:
            continue
        strangers = sorted(
            {
                s
                for e in log_side.kernel_log.xid_events
                if (s := _slot(e.pci_bus_id)) is not None and s not in known
            }
        )
        if strangers:
            found.append(
                f"the kernel log's Xid events name GPU(s) at PCI {', '.join(strangers)}, not "
                f"among the other file's ({', '.join(sorted(k for k in known if k))})"
            )
    return found


def check_same_machine(machines: list[Machine]) -> None:
    """InputError (exit 2) naming the disagreement when the files are of different machines."""
    for i, first in enumerate(machines):
        for other in machines[i + 1 :]:
            found = disagreements(first, other)
            if found:
                raise InputError(
                    f"--from {_label(first)} and {_label(other)}: not the same machine "
                    f"({'; '.join(found)})",
                    fix="give the files of one machine together; check other machines with a "
                    "doctor --from run each",
                )


def merge(machines: list[Machine]) -> Machine:
    """One Machine from several recordings of the same machine; the input order breaks ties."""
    if len(machines) == 1:
        return machines[0]
    ordered = sorted(machines, key=_rank)
    result = ordered[0]
    conflicts: list[ProbeIssue] = []
    for other in ordered[1:]:
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(Machine):
            if f.name in {"origin", "probe_issues", "schema_version", "gpus", "kernel_log"}:
                continue
            changes[f.name] = _merge_values(getattr(result, f.name), getattr(other, f.name))
        changes["gpus"] = _merge_gpus(result.gpus, other.gpus, conflicts)
        changes["kernel_log"] = _merge_kernel_logs(result.kernel_log, other.kernel_log)
        result = dataclasses.replace(result, **changes)
    present = {
        f.name for f in dataclasses.fields(Machine) if getattr(result, f.name) not in (None, ())
    }
    issues: list[ProbeIssue] = list(conflicts)
    for machine in ordered:
        for issue in machine.probe_issues:
            if issue.source not in present and issue not in issues:
                issues.append(issue)
    return dataclasses.replace(
        result,
        origin=Origin(
            kind="merged",
            path=" + ".join(m.origin.path or m.origin.kind for m in machines),
            collected_at=next(
                (m.origin.collected_at for m in ordered if m.origin.collected_at), None
            ),
            hostname=next((m.origin.hostname for m in ordered if m.origin.hostname), None),
            detail=", ".join(m.origin.kind for m in machines),
        ),
        probe_issues=tuple(issues),
    )


def _merge_kernel_logs(first: KernelLog | None, second: KernelLog | None) -> KernelLog | None:
    if first is None or second is None:
        return first or second
    events = first.xid_events + tuple(e for e in second.xid_events if e not in first.xid_events)
    return KernelLog(xid_events=events, source=first.source or second.source)

"""Several recorded files of one machine -> one Machine (`doctor --from A --from B`).

A collect_env paste knows the frameworks, an `nvidia-smi -q -x` the GPUs' health, a dmesg log
the Xid events: each fills what the others lack. Sections are merged field by field, the
richer source first; GPUs are matched by PCI bus id, then UUID, then index, so the XML's
readings and the paste's compute-capability warning end up on the same GPU.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from dlrig.machine.model import Gpu, KernelLog, Machine, Origin, ProbeIssue

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
    if not gpu.pci_bus_id:
        return None
    domain, _, rest = gpu.pci_bus_id.lower().rpartition(":")
    head, _, _ = domain.rpartition(":")
    return f"{int(head or '0', 16):x}:{domain.rsplit(':', 1)[-1]}:{rest}"


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

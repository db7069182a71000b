"""GPU checks, driver-reported errors: Xid lines in the kernel log, ranked by NVIDIA's catalogue."""

from __future__ import annotations

from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.knowledge import xid as xid_knowledge
from dlrig.machine.model import Machine
from dlrig.report import CheckResult

_SEVERITY_RANK = ("critical", "warn", "info")


def _xid_cause(code: int) -> str:
    if code == 79:
        return "gpu_fell_off_bus"
    if code in {48, 63, 64, 94, 95}:
        return "gpu_ecc_error"
    return "xid_error"


@check("gpu.xid_events", "no Xid errors in the kernel log", cause="xid_error")
def xid_events(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """The NVIDIA driver reports GPU errors as 'NVRM: Xid' lines in the kernel log. Each code
    has a meaning and a likely culprit (application, driver, hardware) in NVIDIA's Xid
    catalogue; dlrig ranks them by that severity."""
    if m.kernel_log is None:
        return c.skip("kernel log not in this snapshot")
    events = m.kernel_log.xid_events
    if not events:
        return c.ok("no Xid errors in the kernel log")
    by_code: dict[int, int] = {}
    for event in events:
        by_code[event.code] = by_code.get(event.code, 0) + 1
    ranked = []
    for code, count in by_code.items():
        info = xid_knowledge.lookup(code)
        ranked.append((_SEVERITY_RANK.index(info.severity if info else "warn"), code, count, info))
    ranked.sort()
    worst_rank, worst_code, _, worst_info = ranked[0]
    evidence = []
    for _, code, count, info in ranked:
        name = info.name if info else "not in the Xid table"
        culprit = "/".join(info.culprits) if info and info.culprits else "unknown"
        severity = info.severity if info else "unknown"
        evidence.append(f"Xid {code} ×{count}: {name} (likely {culprit}; {severity})")
    sample = next(e for e in events if e.code == worst_code)
    example = (
        f"e.g. {sample.timestamp or ''} PCI {sample.pci_bus_id or '?'}: {sample.message or ''}"
    )
    evidence.append(example.strip()[:240])
    evidence.append("check: sudo dmesg -T | grep -i xid")
    fix = worst_info.action if worst_info else "Look the code up in NVIDIA's Xid catalogue."
    title = f"Xid {worst_code} in the kernel log" + (f": {worst_info.name}" if worst_info else "")
    if worst_rank == 0:
        return c.fail(title, *evidence, fix=fix, cause=_xid_cause(worst_code))
    if worst_rank == 1:
        return c.warn(title, *evidence, fix=fix, cause=_xid_cause(worst_code))
    return c.info(title, *evidence, fix=fix)

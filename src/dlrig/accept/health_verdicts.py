"""Burn-in verdicts about a GPU's health: memory errors, Xid events, a GPU that went away.

Live, what counts is what appeared during the burn-in (counters at the end against the
start, Xid events the monitor and the kernel log saw); replayed, what the recording shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dlrig.accept.gpu_verdicts import gpu_name
from dlrig.accept.series import GpuTrack
from dlrig.accept.verdict import Verdict, fix_for
from dlrig.knowledge import xid as xid_table

# Xid codes whose cause is memory (NVIDIA's catalogue: DBE, page retirement/remap, contained
# and uncontained ECC errors), as doctor's Xid check reads them.
MEMORY_XIDS = frozenset({48, 63, 64, 94, 95})


def memory_errors(track: GpuTrack, replay: bool) -> Verdict:
    vid, label = "burn_in.ecc", gpu_name(track)
    uncorrected = [v for v in track.column("ecc_uncorrected") if v is not None]
    corrected = [v for v in track.column("ecc_corrected") if v is not None]
    # Live: what appeared during the run. Replay: what the recording shows at all.
    new_unc = (uncorrected[-1] - uncorrected[0]) if uncorrected and not replay else None
    new_cor = (corrected[-1] - corrected[0]) if corrected and not replay else None
    if replay:
        new_unc = max(uncorrected) if uncorrected else None
        new_cor = max(corrected) if corrected else None
    when = "in the recording" if replay else "during the burn-in"
    check = f"check: nvidia-smi -i {track.index} -q -d ECC,PAGE_RETIREMENT,ROW_REMAPPER"
    if track.remap_failure:
        return Verdict.of(
            vid,
            "fail",
            f"{label} failed to remap a memory row",
            "burn-in",
            (check,),
            fix_for("gpu_ecc_error", "the GPU needs service (RMA)"),
            "gpu_ecc_error",
            track.index,
        )
    if new_unc:
        return Verdict.of(
            vid,
            "fail",
            f"{label}: {new_unc:.0f} uncorrectable ECC error(s) {when}",
            "burn-in",
            (check,),
            fix_for("gpu_ecc_error"),
            "gpu_ecc_error",
            track.index,
        )
    pending = track.retired_pages_pending or track.remapped_rows_pending
    if new_cor or pending:
        evidence = [check]
        if new_cor:
            evidence.insert(0, f"{new_cor:.0f} corrected ECC error(s) {when}")
        if pending:
            evidence.insert(0, "a page retirement or row remap is pending (takes effect at reset)")
        return Verdict.of(
            vid,
            "warn",
            f"{label}: memory errors corrected {when}",
            "burn-in",
            tuple(evidence),
            fix_for("gpu_ecc_error", "reset the GPU so the pending remap takes effect, then rerun"),
            "gpu_ecc_error",
            track.index,
        )
    if not uncorrected and not corrected:
        return Verdict.of(
            vid,
            "skip",
            f"{label}: ECC not reported (off or not supported)",
            "burn-in",
            gpu=track.index,
        )
    return Verdict.of(vid, "pass", f"{label}: no ECC errors {when}", "burn-in", gpu=track.index)


def availability(track: GpuTrack) -> Verdict | None:
    """A GPU that was lost or stopped answering during the run."""
    lost = track.status.count("lost")
    hung = track.status.count("hung") + track.status.count("error")
    if not lost and not hung:
        return None
    cause = "gpu_fell_off_bus" if lost else "xid_error"
    what = "fell off the bus" if lost else "stopped answering NVML"
    return Verdict.of(
        "burn_in.availability",
        "fail",
        f"{gpu_name(track)} {what} during the burn-in ({lost + hung} reading(s))",
        "burn-in",
        ("check: sudo dmesg -T | grep -i xid",),
        fix_for(cause),
        cause,
        track.index,
    )


def xid(events: Sequence[dict[str, Any]], replay: bool) -> list[Verdict]:
    """One verdict per GPU (or PCI address) with Xid events during the run."""
    if not events:
        when = "in the recording" if replay else "during the burn-in"
        return [Verdict.of("burn_in.xid", "pass", f"no Xid events {when}", "burn-in")]
    by_subject: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        subject = (
            f"GPU {event['gpu']}"
            if event.get("gpu") is not None
            else (f"PCI {event.get('pci_bus_id') or '?'}")
        )
        by_subject.setdefault(subject, []).append(event)
    verdicts = []
    order = {"critical": 0, "unknown": 1, "warn": 2, "info": 3}
    for subject, found in by_subject.items():
        found.sort(key=lambda e: (order.get(str(e.get("severity")), 1), -int(e.get("count", 0))))
        worst = found[0]
        info = xid_table.lookup(int(worst["code"]))
        evidence = [
            f"Xid {e['code']} ×{e['count']}: {e.get('name') or 'not in the Xid table'} "
            f"({e.get('severity')})"
            for e in found
        ]
        if worst.get("example"):
            evidence.append(f"e.g. {str(worst['example'])[:200]}")
        evidence.append("check: sudo dmesg -T | grep -i xid")
        code = int(worst["code"])
        cause = (
            "gpu_fell_off_bus"
            if code == 79
            else ("gpu_ecc_error" if code in MEMORY_XIDS else "xid_error")
        )
        verdicts.append(
            Verdict.of(
                "burn_in.xid",
                "warn" if worst.get("severity") == "info" else "fail",
                f"Xid {code} ({worst.get('name') or 'unknown code'}) on {subject}"
                + (" in the recording" if replay else " during the burn-in"),
                "burn-in",
                tuple(evidence),
                info.action if info else fix_for("xid_error"),
                cause,
                worst.get("gpu"),
            )
        )
    return verdicts

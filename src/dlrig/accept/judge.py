"""All the verdicts of one acceptance run, and the summary that says what to do first.

Doctor's failing and warning checks and bench's results become verdicts next to the
burn-in's. The summary groups problems that share a cause on one GPU (doctor's Xid check and
the burn-in's Xid verdict are one problem with one fix) and lists them worst first: failures
before warnings, and at one status the burn-in's evidence before bench's before doctor's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from dlrig.accept import gpu_verdicts, health_verdicts, host_verdicts
from dlrig.accept.burnin import BurnIn
from dlrig.accept.verdict import SOURCES, Verdict, rank
from dlrig.report import Status, rounded

if TYPE_CHECKING:
    from dlrig.bench.results import BenchResult
    from dlrig.doctor import DoctorReport

# Parts that measure hardware: falling short is a failed acceptance. The others measure how
# software is set up (DataLoader settings, a packed format): falling short is advice.
HARDWARE_PARTS = frozenset({"compute", "memory", "comms", "storage"})

# Doctor checks that judge the same readings as a burn-in verdict: where the burn-in found the
# problem, doctor's finding joins it in the summary instead of being listed again.
COVERS = {
    "burn_in.pcie": ("doctor.gpu.pcie_width", "doctor.gpu.pcie_gen"),
    "burn_in.power_limit": ("doctor.gpu.power_limit",),
    "burn_in.throttle": ("doctor.gpu.throttle", "doctor.gpu.temperature"),
    "burn_in.ecc": ("doctor.gpu.ecc_errors", "doctor.gpu.retired_pages", "doctor.gpu.row_remap"),
    "burn_in.xid": ("doctor.gpu.xid_events",),
}


def from_doctor(report: DoctorReport | None) -> list[Verdict]:
    """Doctor's failing and warning checks, as verdicts."""
    if report is None:
        return []
    return [
        Verdict.of(
            f"doctor.{check.id}",
            check.status,
            check.title,
            "doctor",
            check.evidence,
            check.fix,
            check.cause,
        )
        for check in report.checks
        if check.status.is_problem
    ]


def from_bench(results: Sequence[BenchResult]) -> list[Verdict]:
    """Bench's results, as verdicts: a hardware part short of its expectation fails the
    acceptance, a software part's (DataLoader settings, a packed format) is advice."""
    verdicts = []
    for result in results:
        part, test, gpu = result.part, result.test, result.gpu_index
        where = f" on GPU {gpu}" if gpu is not None else ""
        hardware = part in HARDWARE_PARTS
        value, unit = result.value, result.unit
        figure = f"{value:g} {unit}" if value is not None else "no figure"
        expected, percent = result.expected, rounded(result.percent, 1)
        evidence = [figure + (f" of {expected:g} expected ({percent}%)" if expected else "")]
        if result.note:
            evidence.append(result.note)
        status: Status
        if result.status is Status.OK:
            status, title = Status.OK, f"{part} {test}{where}: {figure}"
        elif result.status is Status.NOT_JUDGED:
            # A figure with nothing to hold it against (no catalogue peak for this device) was
            # measured, not judged: never a pass.
            status = Status.NOT_JUDGED
            title = f"{part} {test}{where}: {figure}, not judged (no expectation for this device)"
        elif result.status is Status.WARN:  # low
            status = Status.FAIL if hardware else Status.WARN
            title = f"{part} {test}{where} below expectation: {figure}" + (
                f", {percent}% of {expected:g}" if expected else ""
            )
        elif result.status is Status.FAIL:  # could not run
            status = Status.FAIL if hardware else Status.WARN
            title = f"{part} {test}{where} could not run"
        else:
            continue  # skip: listed in the bench section with its reason
        passed = status is Status.OK
        verdicts.append(
            Verdict.of(
                result.id,
                status,
                title,
                "bench",
                tuple(evidence),
                None if passed else result.fix,
                None if passed else result.cause,
                gpu,
            )
        )
    return verdicts


def from_burn_in(burn_in: BurnIn) -> list[Verdict]:
    replay = burn_in.mode == "replay"
    verdicts = host_verdicts.absent(burn_in.absent)
    loads_by_gpu = {
        t.subject: t for t in burn_in.loads if t.kind == "gpu" and t.subject is not None
    }
    for load in loads_by_gpu.values():
        found = host_verdicts.gpu_load(load)
        if found is not None:
            verdicts.append(found)
    for track in burn_in.gpus:
        lost = health_verdicts.availability(track)
        if lost is not None:
            verdicts.append(lost)
        verdicts.append(gpu_verdicts.pcie(track, replay))
        verdicts.append(gpu_verdicts.power_limit(track))
        verdicts.append(gpu_verdicts.throttle(track))
        verdicts.append(gpu_verdicts.clock_sag(track, loads_by_gpu.get(track.index), replay))
        verdicts.append(health_verdicts.memory_errors(track, replay))
    verdicts.extend(gpu_verdicts.peers(burn_in.gpus, loads_by_gpu))
    if burn_in.gpus or burn_in.xids or replay:
        verdicts.extend(health_verdicts.xid(burn_in.xids, replay))
    for load in burn_in.loads:
        if load.kind in ("cpu", "memory"):
            verdicts.append(host_verdicts.host_load(load))
        elif load.kind == "disk":
            verdicts.append(host_verdicts.disk_load(load))
    return verdicts


def summary(verdicts: Sequence[Verdict]) -> dict[str, Any]:
    counts = {status: 0 for status in ("fail", "warn", "pass", "skip")}
    for verdict in verdicts:
        counts[verdict.word] = counts.get(verdict.word, 0) + 1
    problems = [v for v in verdicts if v.status.is_problem]
    order = {id(v): n for n, v in enumerate(verdicts)}
    problems.sort(key=lambda v: (rank(v.word), SOURCES.index(v.source), order[id(v)]))
    groups: dict[object, list[Verdict]] = {}
    covered: dict[str, object] = {}  # a doctor check id -> the burn-in group that covers it
    for verdict in problems:
        key: object = (
            (verdict.cause, verdict.gpu) if verdict.cause else (verdict.id, order[id(verdict)])
        )
        key = covered.get(verdict.id, key)
        groups.setdefault(key, []).append(verdict)
        for doctor_id in COVERS.get(verdict.id, ()):
            covered.setdefault(doctor_id, key)
    first = []
    for members in groups.values():
        lead = members[0]
        first.append(
            {
                "status": lead.word,
                "title": lead.title,
                "fix": lead.fix or next((m.fix for m in members if m.fix), None),
                "cause": lead.cause,
                "gpu": lead.gpu,
                "evidence": list(lead.evidence),
                "ids": [m.id for m in members],
                "also": [m.title for m in members[1:]],
            }
        )
    # A run in which nothing was judged passed nothing: it is "info", not a pass.
    judged = counts["fail"] + counts["warn"] + counts["pass"]
    return {
        "result": "fail" if counts["fail"] else ("pass" if judged else "info"),
        "counts": counts,
        "problems": first,
    }

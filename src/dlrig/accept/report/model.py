"""The page as a document: everything the HTML shows, built from the input documents alone.

`dlrig report --json` prints this document and the HTML is rendered from it, so a page can be
checked (and rebuilt) without a browser. Problems from every input are judged in one
vocabulary (accept's verdicts) and summarised as accept summarises its own: worst first, one
entry per cause and GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from dlrig.accept import judge, stages
from dlrig.accept.report import compare as compare_runs
from dlrig.accept.report import facts as machine_facts
from dlrig.accept.report import figures
from dlrig.accept.report.inputs import HISTORY_SCHEMA, Input, check_one_machine, machines
from dlrig.accept.verdict import Verdict
from dlrig.bench import BenchReport
from dlrig.doctor import DoctorReport
from dlrig.errors import InputError
from dlrig.fit.result import FitResult
from dlrig.machine.model import Machine
from dlrig.monitor.report import HistoryReport
from dlrig.profile.model import GPU_PARTS, HOST_PHASES, PART_LABELS, ProfileReport
from dlrig.report import Status, envelope

SCHEMA_NAME = "dlrig.report"
SCHEMA_VERSION = 1
MACHINE_PRIORITY = ("dlrig.accept", "dlrig.doctor", "dlrig.machine", "dlrig.bench")
T = TypeVar("T")


def _typed(reader: Callable[[dict[str, Any]], T], document: dict[str, Any], kind: str) -> T:
    """A saved document as its command's typed report, or one line naming what does not fit."""
    try:
        return reader(document)
    except (KeyError, ValueError, TypeError) as exc:
        raise InputError(
            f"{kind} document: {exc}", fix=f"give a file `dlrig {kind} --json` wrote"
        ) from None


def verdict_of(entry: dict[str, Any]) -> Verdict:
    try:
        return Verdict.from_dict({"source": "burn-in", **entry})
    except (KeyError, ValueError) as exc:
        raise InputError(
            f"accept document: a verdict does not read ({exc})", fix="give an `accept --json` file"
        ) from None


def _doctor_of_snapshot(document: dict[str, Any]) -> DoctorReport:
    """A saved snapshot is judged by doctor's checks (pure functions of it)."""
    try:
        machine = Machine.from_dict(document)
    except ValueError as exc:
        raise InputError(f"machine snapshot: {exc}", fix="give a `doctor --save` file") from None
    return stages.doctor_report(machine)


def _fit_verdicts(fit: FitResult) -> list[Verdict]:
    if fit.fits:
        return []
    need = (
        f": needs {fit.memory_peak_bytes / 2**30:.1f} GiB of {fit.gpu_memory_bytes / 2**30:.1f} GiB"
    )
    advice = [a for a in fit.advice if a.fits]
    fix = (
        f"try {advice[0].change} (fits at {advice[0].memory_peak_bytes / 2**30:.1f} GiB)"
        if advice
        else "a smaller batch, gradient checkpointing, or sharding (`dlrig fit --help`)"
    )
    return [
        Verdict.of(
            "fit.fits",
            "warn",
            f"{fit.model} does not fit on {fit.gpu}{need}",
            "fit",
            fit.assumptions,
            fix,
            "cuda_oom",
        )
    ]


def _monitor_verdicts(report: HistoryReport) -> list[Verdict]:
    verdicts = []
    for gpu in report.gpus:
        if gpu.seconds and gpu.throttled_seconds / gpu.seconds >= 0.05:
            reasons = ", ".join(
                f"{k} {v:.0f} s" for k, v in gpu.throttled_seconds_by_reason.items()
            )
            verdicts.append(
                Verdict.of(
                    "monitor.throttle",
                    "warn",
                    f"GPU {gpu.gpu} throttled {gpu.throttled_seconds / gpu.seconds:.0%} of the "
                    "recorded time",
                    "monitor",
                    (reasons,) if reasons else (),
                    None,
                    "gpu_throttling",
                    gpu.gpu,
                )
            )
    for event in report.xid_events:
        verdicts.append(
            Verdict.of(
                "monitor.xid",
                "fail",
                f"Xid {event.xid} recorded on GPU {event.gpu} ({event.count}x)",
                "monitor",
                ("`dlrig diagnose` on the kernel log explains it",),
                None,
                "gpu_fell_off_bus" if event.xid == 79 else "xid_error",
                event.gpu,
            )
        )
    return verdicts


def _doctor_section(label: str, report: DoctorReport) -> dict[str, Any]:
    shown_statuses = (Status.FAIL, Status.WARN, Status.INFO)
    shown = sorted(
        (c for c in report.checks if c.status in shown_statuses),
        key=lambda c: shown_statuses.index(c.status),
    )
    return {
        "label": label,
        "counts": report.summary.counts,
        "checks": [c.to_dict() for c in shown],
        "ok": [c.title for c in report.checks if c.status is Status.OK],
        "skipped": sum(1 for c in report.checks if c.status is Status.SKIP),
    }


def _bench_section(
    label: str, report: BenchReport, skipped: Mapping[str, str] | None = None
) -> dict[str, Any]:
    return {
        "label": label,
        "device": None if report.device is None else report.device.to_dict(),
        "results": [r.to_dict() for r in report.results if r.status is not Status.SKIP],
        "skipped": [
            {"part": r.part, "test": r.test, "note": r.note}
            for r in report.results
            if r.status is Status.SKIP
        ]
        + [{"part": p, "test": "", "note": why} for p, why in (skipped or {}).items()],
    }


def _burn_in_section(label: str, burn_in: dict[str, Any]) -> dict[str, Any]:
    return {
        "label": label,
        **burn_in,
        "gpu_figures": figures.gpu_figures(burn_in),
        "load_figures": figures.load_figures(burn_in),
    }


def _fit_section(label: str, fit: FitResult) -> dict[str, Any]:
    return {
        "label": label,
        "model": fit.model,
        "gpu": fit.gpu,
        "method": fit.method,
        "fits": fit.fits,
        "gpu_memory_bytes": fit.gpu_memory_bytes,
        "peak_bytes": fit.memory_peak_bytes,
        "breakdown": fit.memory_breakdown,
        "batch_size": fit.batch_size,
        "max_batch_size": fit.max_batch_size,
        "step_time_s": fit.step_time_s,
        "samples_per_s": fit.samples_per_s,
        "tokens_per_s": fit.tokens_per_s,
        "mfu": fit.mfu,
        "setup": fit.setup,
        "assumptions": list(fit.assumptions),
    }


# The parts of a step's bar, in order, with their labels (dlrig.profile's host phases on a CPU
# run; the GPU's use of the step's wall time where there is a GPU).
PROFILE_GPU_PARTS = tuple((part, PART_LABELS[part]) for part in GPU_PARTS)
PROFILE_HOST_PHASES = tuple((phase, PART_LABELS[phase]) for phase in HOST_PHASES)


def _profile_verdicts(profile: ProfileReport) -> list[Verdict]:
    """The profile's findings as warnings: they slow the run, they do not fail a machine."""
    return [
        Verdict.of(
            f"profile.{finding.cause}",
            "warn",
            f"{finding.title} (up to x{finding.gain:.2f} per step)",
            "profile",
            finding.evidence,
            finding.fix,
            finding.cause,
        )
        for finding in profile.findings
    ]


def _profile_section(label: str, profile: ProfileReport) -> dict[str, Any]:
    """Per rank, a stacked bar per step: each part's share of the longest step."""
    ranks = []
    for rank in profile.ranks:
        gpu = any(step.gpu for step in rank.steps)
        parts = PROFILE_GPU_PARTS if gpu else PROFILE_HOST_PHASES
        longest = max((step.step_ms for step in rank.steps), default=0.0) or 1.0
        bars = []
        for step in (s.to_dict() for s in rank.steps):  # the rounded figures the JSON has
            split = step["gpu_ms" if gpu else "host_ms"] or {}
            bars.append(
                {
                    "name": step["name"],
                    "step_ms": step["step_ms"],
                    "parts": [
                        {
                            "part": part,
                            "label": text,
                            "ms": float(split.get(part) or 0.0),
                            "width": 100.0 * float(split.get(part) or 0.0) / longest,
                        }
                        for part, text in parts
                    ],
                }
            )
        document = rank.to_dict()
        ranks.append(
            {
                "rank": rank.rank,
                "path": rank.path,
                "device": rank.device or ("GPU" if gpu else "CPU"),
                "mean_step_ms": document["mean_step_ms"],
                "legend": [{"part": part, "label": text} for part, text in parts],
                "bars": bars,
                "top_kernels": document["top_kernels"][:5],
                "mfu": document["mfu"]["mfu"],
            }
        )
    return {
        "label": label,
        "verdict": None if profile.verdict is None else profile.verdict.to_dict(),
        "ranks": ranks,
        "stragglers": list(profile.stragglers),
    }


def sections(inputs: Sequence[Input]) -> dict[str, Any]:
    """Every input's sections and verdicts (also what `--compare` reads of the old run)."""
    out: dict[str, Any] = {
        "runs": [],
        "burn_ins": [],
        "bench": [],
        "doctor": [],
        "fits": [],
        "monitor": [],
        "profiles": [],
        "verdicts": [],
        "machine": None,
    }
    machines: dict[str, dict[str, Any]] = {}
    for item in inputs:
        doc, label, schema = item.document, item.label, item.schema
        snapshot = machine_facts.machine_of(schema, doc)
        if snapshot is not None:
            machines.setdefault(schema, snapshot)
        if schema == "dlrig.accept":
            out["verdicts"] += [verdict_of(v) for v in doc.get("verdicts") or ()]
            out["runs"].append(
                {
                    "label": label,
                    **{
                        k: doc.get(k)
                        for k in (
                            "level",
                            "level_description",
                            "mode",
                            "replay",
                            "minutes",
                            "hostname",
                            "started_at",
                            "finished_at",
                            "seconds",
                            "complete",
                            "stopped_by",
                            "stopped_during",
                            "result",
                            "files",
                        )
                    },
                    "verdicts": doc.get("verdicts") or [],
                }
            )
            if doc.get("doctor"):
                out["doctor"].append(
                    _doctor_section(label, _typed(DoctorReport.from_dict, doc["doctor"], "doctor"))
                )
            if doc.get("bench"):
                skipped = doc["bench"].get("skipped") or {}
                bench = _typed(
                    BenchReport.from_dict,
                    {k: v for k, v in doc["bench"].items() if k != "skipped"},
                    "bench",
                )
                out["bench"].append(_bench_section(label, bench, skipped))
            if doc.get("burn_in"):
                out["burn_ins"].append(_burn_in_section(label, doc["burn_in"]))
        elif schema in ("dlrig.doctor", "dlrig.machine"):
            doctor = (
                _typed(DoctorReport.from_dict, doc, "doctor")
                if schema == "dlrig.doctor"
                else _doctor_of_snapshot(doc)
            )
            out["verdicts"] += judge.from_doctor(doctor)
            out["doctor"].append(_doctor_section(label, doctor))
        elif schema == "dlrig.bench":
            bench = _typed(BenchReport.from_dict, doc, "bench")
            out["verdicts"] += judge.from_bench(bench.results)
            out["bench"].append(_bench_section(label, bench))
        elif schema == "dlrig.fit":
            fit = _typed(FitResult.from_dict, doc, "fit")
            out["verdicts"] += _fit_verdicts(fit)
            out["fits"].append(_fit_section(label, fit))
        elif schema in ("dlrig.monitor.report", HISTORY_SCHEMA):
            report = _typed(
                HistoryReport.from_dict,
                doc if schema == "dlrig.monitor.report" else doc["report"],
                "monitor report",
            )
            out["verdicts"] += _monitor_verdicts(report)
            out["monitor"].append(
                {
                    "label": label,
                    "report": report.to_dict(),
                    # A history has time series; a report of one has only its figures.
                    "gpus": (doc.get("gpus") or []) if schema == HISTORY_SCHEMA else [],
                    "host": doc.get("host") if schema == HISTORY_SCHEMA else None,
                }
            )
        elif schema == "dlrig.profile":
            profile = _typed(ProfileReport.from_dict, doc, "profile")
            out["verdicts"] += _profile_verdicts(profile)
            out["profiles"].append(_profile_section(label, profile))
        elif schema == "dlrig.monitor.sample":
            out["monitor"].append({"label": label, "sample": doc, "gpus": [], "host": None})
    for schema in MACHINE_PRIORITY:
        if schema in machines:
            out["machine"] = machine_facts.facts(machines[schema])
            break
    return out


def build(
    inputs: Sequence[Input], compare_with: Input | None = None, *, several_machines: bool = False
) -> dict[str, Any]:

    if not inputs:
        raise InputError("no input files", fix="give dlrig JSON documents, e.g. accept.json")
    if not several_machines:
        check_one_machine(list(inputs))
    named = [name for _, name in machines(list(inputs))]
    current = sections(inputs)
    verdicts: list[Verdict] = current.pop("verdicts")
    summary = judge.summary(verdicts)
    judged = bool(verdicts) or any(current[k] for k in ("runs", "doctor", "bench"))
    result = summary["result"] if judged else "info"
    if any(run.get("complete") is False for run in current["runs"]) and result == "pass":
        result = "incomplete"
    changes = None
    if compare_with is not None:
        old = sections([compare_with])
        old_verdicts = old.pop("verdicts")
        changes = compare_runs.changes(old, current, old_verdicts, verdicts)
    machine = current["machine"] or {}
    host = machine.get("hostname") or next(
        (r.get("hostname") for r in current["runs"] if r.get("hostname")), None
    )
    kinds = "acceptance report" if current["runs"] else "report"
    if len(named) > 1:
        # One page of several machines says so; the machine section shows the first one's facts.
        host = f"{len(named)} machines ({', '.join(named)})"
    replayed = [Path(f).name for r in current["runs"] for f in r.get("replay") or ()]
    if not host and replayed:
        host = "recorded " + ", ".join(replayed)
    return envelope(
        SCHEMA_NAME,
        SCHEMA_VERSION,
        {
            "title": f"{host}: {kinds}" if host else f"dlrig {kinds}",
            "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "inputs": [
                {"path": i.path, "label": i.label, "schema": i.schema, "kind": i.kind}
                for i in inputs
            ],
            "compare_with": None
            if compare_with is None
            else {
                "path": compare_with.path,
                "label": compare_with.label,
                "schema": compare_with.schema,
                "kind": compare_with.kind,
            },
            "result": result,
            "summary": summary,
            "changes": changes,
            **current,
        },
    )

"""The page as a document: everything the HTML shows, built from the input documents alone.

`dlrig report --json` prints this document and the HTML is rendered from it, so a page can be
checked (and rebuilt) without a browser. Problems from every input are judged in one
vocabulary (accept's verdicts) and summarised as accept summarises its own: worst first, one
entry per cause and GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dlrig.accept import judge, stages
from dlrig.accept.report import compare as compare_runs
from dlrig.accept.report import facts as machine_facts
from dlrig.accept.report import figures
from dlrig.accept.report.inputs import HISTORY_SCHEMA, Input, check_one_machine, machines
from dlrig.accept.verdict import Verdict
from dlrig.bench import BenchReport
from dlrig.doctor import DoctorReport
from dlrig.errors import InputError
from dlrig.machine.model import Machine
from dlrig.profile.model import GPU_PARTS, HOST_PHASES, PART_LABELS
from dlrig.report import Status, envelope

SCHEMA_NAME = "dlrig.report"
SCHEMA_VERSION = 1
MACHINE_PRIORITY = ("dlrig.accept", "dlrig.doctor", "dlrig.machine", "dlrig.bench")


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


def _doctor_of(document: dict[str, Any]) -> DoctorReport:
    try:
        return DoctorReport.from_dict(document)
    except (KeyError, ValueError) as exc:
        raise InputError(f"doctor document: {exc}", fix="give a `doctor --json` file") from None


def _bench_of(document: dict[str, Any]) -> BenchReport:
    try:
        return BenchReport.from_dict(document)
    except (KeyError, ValueError) as exc:
        raise InputError(f"bench document: {exc}", fix="give a `bench --json` file") from None


def _fit_verdicts(document: dict[str, Any]) -> list[Verdict]:
    if document.get("fits") is not False:
        return []
    peak = (document.get("memory") or {}).get("peak_bytes")
    capacity = document.get("gpu_memory_bytes")
    need = (
        f": needs {peak / 2**30:.1f} GiB of {capacity / 2**30:.1f} GiB"
        if isinstance(peak, int) and isinstance(capacity, int)
        else ""
    )
    advice = [a for a in document.get("advice") or () if a.get("fits")]
    fix = (
        f"try {advice[0]['change']} (fits at {advice[0]['memory_peak_bytes'] / 2**30:.1f} GiB)"
        if advice
        else "a smaller batch, gradient checkpointing, or sharding (`dlrig fit --help`)"
    )
    return [
        Verdict.of(
            "fit.fits",
            "warn",
            f"{document.get('model')} does not fit on {document.get('gpu')}{need}",
            "fit",
            tuple(document.get("assumptions") or ()),
            fix,
            "cuda_oom",
        )
    ]


def _monitor_verdicts(report: dict[str, Any]) -> list[Verdict]:
    verdicts = []
    for gpu in report.get("gpus") or ():
        seconds = gpu.get("seconds") or 0.0
        throttled = gpu.get("throttled_seconds") or 0.0
        if seconds and throttled / seconds >= 0.05:
            reasons = ", ".join(
                f"{k} {v:.0f} s" for k, v in (gpu.get("throttled_seconds_by_reason") or {}).items()
            )
            verdicts.append(
                Verdict.of(
                    "monitor.throttle",
                    "warn",
                    f"GPU {gpu['gpu']} throttled {throttled / seconds:.0%} of the recorded time",
                    "monitor",
                    (reasons,) if reasons else (),
                    None,
                    "gpu_throttling",
                    gpu["gpu"],
                )
            )
    for event in report.get("xid_events") or ():
        verdicts.append(
            Verdict.of(
                "monitor.xid",
                "fail",
                f"Xid {event['xid']} recorded on GPU {event['gpu']} ({event['count']}x)",
                "monitor",
                ("`dlrig diagnose` on the kernel log explains it",),
                None,
                "gpu_fell_off_bus" if event["xid"] == 79 else "xid_error",
                event.get("gpu"),
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


def _fit_section(label: str, document: dict[str, Any]) -> dict[str, Any]:
    memory = document.get("memory") or {}
    return {
        "label": label,
        "model": document.get("model"),
        "gpu": document.get("gpu"),
        "method": document.get("method"),
        "fits": document.get("fits"),
        "gpu_memory_bytes": document.get("gpu_memory_bytes"),
        "peak_bytes": memory.get("peak_bytes"),
        "breakdown": memory.get("breakdown") or {},
        "batch_size": document.get("batch_size"),
        "max_batch_size": document.get("max_batch_size"),
        "step_time_s": document.get("step_time_s"),
        "samples_per_s": document.get("samples_per_s"),
        "tokens_per_s": document.get("tokens_per_s"),
        "mfu": document.get("mfu"),
        "setup": document.get("setup") or {},
        "assumptions": document.get("assumptions") or [],
    }


# The parts of a step's bar, in order, with their labels (dlrig.profile's host phases on a CPU
# run; the GPU's use of the step's wall time where there is a GPU).
PROFILE_GPU_PARTS = tuple((part, PART_LABELS[part]) for part in GPU_PARTS)
PROFILE_HOST_PHASES = tuple((phase, PART_LABELS[phase]) for phase in HOST_PHASES)


def _profile_verdicts(document: dict[str, Any]) -> list[Verdict]:
    """The profile's findings as warnings: they slow the run, they do not fail a machine."""
    return [
        Verdict.of(
            f"profile.{finding.get('cause')}",
            "warn",
            f"{finding.get('title')} (up to x{finding.get('expected_speedup', 1):.2f} per step)",
            "profile",
            tuple(finding.get("evidence") or ()),
            finding.get("fix"),
            finding.get("cause"),
        )
        for finding in document.get("findings") or ()
        if isinstance(finding, dict)
    ]


def _profile_section(label: str, document: dict[str, Any]) -> dict[str, Any]:
    """Per rank, a stacked bar per step: each part's share of the longest step."""
    ranks = []
    for rank in document.get("ranks") or ():
        steps = rank.get("steps") or []
        gpu = any(step.get("gpu_ms") for step in steps)
        parts = PROFILE_GPU_PARTS if gpu else PROFILE_HOST_PHASES
        key = "gpu_ms" if gpu else "host_ms"
        longest = max((float(step.get("step_ms") or 0) for step in steps), default=0.0) or 1.0
        bars = [
            {
                "name": step.get("name"),
                "step_ms": step.get("step_ms"),
                "parts": [
                    {
                        "part": part,
                        "label": text,
                        "ms": float((step.get(key) or {}).get(part) or 0.0),
                        "width": 100.0 * float((step.get(key) or {}).get(part) or 0.0) / longest,
                    }
                    for part, text in parts
                ],
            }
            for step in steps
        ]
        ranks.append(
            {
                "rank": rank.get("rank"),
                "path": rank.get("path"),
                "device": rank.get("device") or ("GPU" if gpu else "CPU"),
                "mean_step_ms": rank.get("mean_step_ms"),
                "legend": [{"part": part, "label": text} for part, text in parts],
                "bars": bars,
                "top_kernels": (rank.get("top_kernels") or [])[:5],
                "mfu": (rank.get("mfu") or {}).get("mfu"),
            }
        )
    verdict = document.get("verdict")
    return {
        "label": label,
        "verdict": verdict,
        "ranks": ranks,
        "stragglers": document.get("stragglers") or [],
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
                out["doctor"].append(_doctor_section(label, _doctor_of(doc["doctor"])))
            if doc.get("bench"):
                skipped = doc["bench"].get("skipped") or {}
                bench = _bench_of({k: v for k, v in doc["bench"].items() if k != "skipped"})
                out["bench"].append(_bench_section(label, bench, skipped))
            if doc.get("burn_in"):
                out["burn_ins"].append(_burn_in_section(label, doc["burn_in"]))
        elif schema in ("dlrig.doctor", "dlrig.machine"):
            doctor = _doctor_of(doc) if schema == "dlrig.doctor" else _doctor_of_snapshot(doc)
            out["verdicts"] += judge.from_doctor(doctor)
            out["doctor"].append(_doctor_section(label, doctor))
        elif schema == "dlrig.bench":
            bench = _bench_of(doc)
            out["verdicts"] += judge.from_bench(bench.results)
            out["bench"].append(_bench_section(label, bench))
        elif schema == "dlrig.fit":
            out["verdicts"] += _fit_verdicts(doc)
            out["fits"].append(_fit_section(label, doc))
        elif schema in ("dlrig.monitor.report", HISTORY_SCHEMA):
            report = doc if schema == "dlrig.monitor.report" else doc["report"]
            out["verdicts"] += _monitor_verdicts(report)
            out["monitor"].append(
                {
                    "label": label,
                    "report": report,
                    # A history has time series; a report of one has only its figures.
                    "gpus": (doc.get("gpus") or []) if schema == HISTORY_SCHEMA else [],
                    "host": doc.get("host") if schema == HISTORY_SCHEMA else None,
                }
            )
        elif schema == "dlrig.profile":
            out["verdicts"] += _profile_verdicts(doc)
            out["profiles"].append(_profile_section(label, doc))
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

"""`dlrig accept`: prove a new or repaired server: doctor, every bench part, then a burn-in
with the monitor recording, and verdicts with their evidence and fixes.

Python API:

    from dlrig import accept
    run = accept.run(accept.AcceptOptions(level="quick", minutes=2, out_dir="acceptance/"))
    print(run.result)                               # "pass" or "fail"
    for problem in run.summary["problems"]:         # what to do first
        print(problem["status"], problem["title"], problem["fix"])
    run.write()                                     # acceptance/accept.json (+ report.html)

    # judge recorded evidence instead (no load is generated):
    accept.run(accept.AcceptOptions(replay=("nvidia-smi-q-x.xml", "dmesg.log"), out_dir="r/"))

A stop signal (SIGINT, SIGTERM, SIGHUP) ends the run early without losing it: the load
workers are killed, what was recorded is kept, and the result says which signal stopped it
(`stopped_by`); `dlrig accept` writes that partial document and then exits with the signal.
"""

from __future__ import annotations

import contextlib
import socket
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlrig import lifecycle
from dlrig.errors import InputError, MissingExtraError
from dlrig.inputs import check_readable_file
from dlrig.outputs import ensure_directory, write_text_atomic
from dlrig.report import Progress, envelope, no_progress

if TYPE_CHECKING:
    from dlrig.accept import levels
    from dlrig.accept.burnin import BurnIn
    from dlrig.accept.verdict import Verdict
    from dlrig.bench import BenchReport
    from dlrig.doctor import DoctorReport
    from dlrig.machine.model import Machine

# The rest of the package is imported where it is used: every burn-in load worker is
# `python -m dlrig.accept.worker`, which imports this package first, and a worker must start
# in a fraction of a second, not pay for the monitor, the verdicts and the machine model.

__all__ = ["SCHEMA_NAME", "SCHEMA_VERSION", "AcceptOptions", "AcceptRun", "run"]

SCHEMA_NAME = "dlrig.accept"
SCHEMA_VERSION = 1
DOCUMENT_NAME = "accept.json"
REPORT_NAME = "report.html"


@dataclass(frozen=True)
class AcceptOptions:
    level: str = "medium"
    minutes: float | None = None  # the burn-in's length; None: the level's
    out_dir: str | None = None  # None: ./accept-HOST-YYYYmmddTHHMMSS
    replay: tuple[str, ...] = ()  # judge these recorded files instead of this machine
    gpu_indices: tuple[int, ...] = ()  # NVML's numbering; () = every GPU
    path: str | None = None  # where the storage test and the disk load write (default: out)
    machine: str | None = None  # a saved snapshot instead of probing
    skip: tuple[str, ...] = ()  # bench parts not to run, or "bench" for none


@dataclass
class AcceptRun:
    options: AcceptOptions
    level: levels.Level
    out_dir: Path
    started_unix: float
    finished_unix: float | None = None
    stopped_by: str | None = None
    stop_signal: int | None = None  # the signal's number, to exit with it after writing
    stage: str | None = None  # the stage a signal stopped
    doctor: DoctorReport | None = None
    bench: BenchReport | None = None  # the parts that ran, each result on its GPU
    bench_skipped: dict[str, str] = field(default_factory=dict)
    burn_in: BurnIn | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)
    report_error: str | None = None  # why report.html was not written, if it was not

    @property
    def result(self) -> str:
        return str(self.summary.get("result", "fail"))

    @property
    def failed(self) -> bool:
        return self.result == "fail"

    def to_dict(self) -> dict[str, Any]:
        options = self.options
        bench = None
        if self.bench is not None:
            bench = {**self.bench.to_dict(), "skipped": dict(self.bench_skipped)}
        finished = self.finished_unix or time.time()
        burn = self.burn_in
        return envelope(
            SCHEMA_NAME,
            SCHEMA_VERSION,
            {
                "level": self.level.name,
                "level_description": self.level.description,
                "mode": "replay" if options.replay else "live",
                "replay": list(options.replay),
                "minutes": None if options.replay else _minutes(options, self.level),
                # A replay is of another machine: never this one's name.
                "hostname": _hostname(self.doctor)
                or (None if options.replay else socket.gethostname()),
                "started_at": _iso(self.started_unix),
                "finished_at": _iso(finished),
                "seconds": round(finished - self.started_unix, 2),
                "complete": self.stopped_by is None,
                "stopped_by": self.stopped_by,
                "stopped_during": self.stage if self.stopped_by else None,
                "out_dir": str(self.out_dir),
                "files": {
                    "document": str(self.out_dir / DOCUMENT_NAME),
                    "history_db": burn.history_db if burn else None,
                    "report": str(self.out_dir / REPORT_NAME),
                },
                "result": self.result,
                "summary": self.summary,
                "verdicts": [v.to_dict() for v in self.verdicts],
                "doctor": self.doctor.to_dict() if self.doctor else None,
                "bench": bench,
                "burn_in": burn.to_dict() if burn else None,
            },
        )

    def write(self, with_report: bool = True) -> list[Path]:
        """accept.json, and report.html when the report extra is installed; the files written.
        The page is rendered from the document itself, as `dlrig report accept.json` does."""
        import json

        document = self.to_dict()
        written = [
            write_text_atomic(
                self.out_dir / DOCUMENT_NAME, json.dumps(document, indent=2, default=str) + "\n"
            )
        ]
        if with_report:
            from dlrig.accept import report  # lazy: load workers import this package

            try:
                page = report.build_from_documents([(str(written[0]), document)])
                written.append(report.write_html(page, self.out_dir / REPORT_NAME))
            except MissingExtraError as exc:
                self.report_error = exc.one_line()
            except Exception as exc:  # noqa: BLE001 - a long run's document must survive a page bug
                self.report_error = f"{type(exc).__name__}: {exc} (a bug in dlrig report)"
        return written


def _minutes(options: AcceptOptions, level: levels.Level) -> float:
    return options.minutes if options.minutes is not None else level.burn_in_minutes


def _iso(unix: float) -> str:
    return datetime.fromtimestamp(unix, UTC).isoformat(timespec="seconds")


def _hostname(doctor: DoctorReport | None) -> str | None:
    origin = doctor.machine.origin if doctor else None
    return origin.hostname if origin and origin.hostname else None


def default_out_dir() -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(f"accept-{socket.gethostname()}-{stamp}")


def run(
    options: AcceptOptions, *, machine: Machine | None = None, progress: Progress = no_progress
) -> AcceptRun:
    """Doctor, bench, burn-in (or the replayed readings), then the verdicts. Bad input raises
    InputError before anything runs; a stop signal ends the run early and is recorded.

    `machine`: the facts to judge instead of probing (or reading `options.replay` /
    `options.machine` for them)."""
    from dlrig.accept import levels, stages  # lazy: load workers import this package

    for path in options.replay:
        check_readable_file(path, "recorded evidence")
    if options.machine:
        check_readable_file(options.machine, "machine snapshot")
    level = levels.get(options.level)
    minutes = _minutes(options, level)
    if not options.replay and not 0 < minutes <= 7 * 24 * 60:
        raise InputError(f"--minutes {minutes:g} is not a burn-in length", fix="e.g. --minutes 10")
    parts, skipped = stages.bench_parts(level, options.skip)  # checks --skip before any work
    storage_dir = _existing_directory(options.path) if options.path else None
    wanted = Path(options.out_dir) if options.out_dir else default_out_dir()
    existed = wanted.exists()
    out_dir = ensure_directory(wanted, "--out")
    storage_dir = storage_dir or out_dir
    try:
        return _judged(
            options, machine, progress, level, minutes, out_dir, storage_dir, parts, skipped
        )
    except InputError:
        # Bad input found once the facts are read (an unreadable recording, a --gpu-index the
        # machine lacks): leave no empty folder of ours behind.
        if not existed:
            with contextlib.suppress(OSError):
                out_dir.rmdir()  # only when still empty
        raise


def _judged(
    options: AcceptOptions,
    machine: Machine | None,
    progress: Progress,
    level: levels.Level,
    minutes: float,
    out_dir: Path,
    storage_dir: Path,
    parts: list[str],
    skipped: dict[str, str],
) -> AcceptRun:
    from dlrig.accept import burnin, judge, stages  # lazy: load workers import this package

    accepted = AcceptRun(options, level, out_dir, time.time())
    try:
        accepted.stage = "doctor"
        # Nothing is printed before the facts are in: an input error stays one line.
        if machine is None:
            machine = stages.machine_snapshot(options.replay, options.machine)
        stages.check_gpu_indices(machine, options.gpu_indices)
        progress("doctor: checking the machine's facts", 0.0)
        accepted.doctor = stages.doctor_report(machine)
        if not options.replay:
            accepted.bench_skipped = skipped
            accepted.bench = stages.empty_bench_report()
            accepted.stage = "bench"
            stages.run_bench(
                level,
                parts,
                machine,
                options.gpu_indices,
                storage_dir,
                progress,
                accepted.bench,
                accepted.bench_skipped,
            )
            accepted.stage = "burn-in"
            accepted.burn_in = burnin.run_live(
                machine,
                out_dir,
                minutes * 60.0,
                options.gpu_indices,
                storage_dir,
                level.storage_bytes,
                progress,
            )
            if accepted.burn_in.stopped_by is None:
                accepted.stage = "kernel log"
                events = stages.kernel_xids_after(machine)
                accepted.burn_in.xids.extend(burnin.xid_counts(events, machine))
            else:
                accepted.stopped_by = accepted.burn_in.stopped_by
                accepted.stop_signal = accepted.burn_in.stop_signal
        else:
            accepted.stage = "replay"
            accepted.burn_in = burnin.run_replay(options.replay, machine)
    except lifecycle.Stopped as stop:
        accepted.stopped_by, accepted.stop_signal = stop.name, stop.signum
    finally:
        accepted.finished_unix = time.time()
    accepted.verdicts = (
        (judge.from_burn_in(accepted.burn_in) if accepted.burn_in else [])
        + judge.from_bench(accepted.bench.results if accepted.bench else ())
        + judge.from_doctor(accepted.doctor)
    )
    accepted.summary = judge.summary(accepted.verdicts)
    if accepted.stopped_by and accepted.summary["result"] == "pass":
        # An acceptance that did not finish has not passed.
        accepted.summary["result"] = "incomplete"
    return accepted


def _existing_directory(path: str | Path) -> Path:
    """--path names the disk the data is on: it must exist (a typo must not get a new folder
    whose disk is then tested and passed), as `bench storage --path` requires."""
    directory = Path(path)
    if not directory.exists():
        raise InputError(
            f"--path {directory}: no such directory",
            fix="give the directory your dataset is on (it is not created)",
        )
    if not directory.is_dir():
        raise InputError(f"--path {directory}: is not a directory", fix="give a directory")
    return directory

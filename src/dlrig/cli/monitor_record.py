"""`dlrig monitor record`'s two jobs: an nvidia-smi capture (--out) and a history (--db).

A history records until --duration or a stop signal; either way the summary is printed (what was
written, what was dropped), and then a signal still ends the command with its exit code.
"""

from __future__ import annotations

from pathlib import Path

from dlrig import lifecycle, monitor
from dlrig.cli.common import console, print_json
from dlrig.cli.monitor_options import SourceSettings
from dlrig.errors import DlrigError
from dlrig.inputs import read_text
from dlrig.machine import recorder
from dlrig.monitor.history import Retention
from dlrig.outputs import write_text_atomic
from dlrig.report import envelope


def record_capture(path: Path, state: str, as_json: bool) -> None:
    existing = read_text(path, "capture", 200 * 1000 * 1000) if path.exists() else None
    write_text_atomic(path, recorder.record(state, existing))
    if as_json:
        print_json(envelope("dlrig.monitor.record", 1, {"capture": str(path), "state": state}))
    else:
        console(stderr=True).print(
            f"recorded state {state!r} to {path}; replay it with `dlrig monitor --replay {path}`"
        )


def record_history(
    settings: SourceSettings,
    db: str,
    duration: float | None,
    max_age_days: float,
    max_size_mb: float,
    as_json: bool,
) -> None:
    recorder = monitor.HistoryRecorder(
        settings.open(),
        db,
        retention=Retention(max_age_seconds=max_age_days * 86400, max_bytes=int(max_size_mb * 1e6)),
        **settings.sampling(),
    )
    info = recorder.sampler.source.info
    err = console(stderr=True)
    if info.note:
        err.print(f"dlrig monitor: {info.note}")
    err.print(
        f"dlrig monitor: recording {info.description} into {db} every {settings.interval:g} s"
    )
    stopped: lifecycle.Stopped | None = None
    try:
        recorder.start()
        recorder.wait(duration)
    except lifecycle.Stopped as signal_stop:
        stopped = signal_stop  # report what was written, then exit as the signal says
    finally:
        summary = recorder.stop()
    document = envelope(
        "dlrig.monitor.record",
        1,
        {
            "db": summary.db,
            "samples_written": summary.samples_written,
            "samples_dropped": summary.samples_dropped,
            "stopped_by": stopped.name if stopped else None,
            "error": summary.error,
        },
    )
    if as_json:
        print_json(document)
    else:
        dropped = summary.samples_dropped
        err.print(
            f"wrote {summary.samples_written} sample{'' if summary.samples_written == 1 else 's'}"
            f" to {db}" + (f" ({dropped} dropped: the disk fell behind)" if dropped else "")
        )
    if stopped is not None:
        raise stopped
    if summary.error is not None:
        raise DlrigError(
            f"{db}: cannot write the history ({summary.error})",
            fix="free disk space or record to another file; the samples written so far are kept",
        )

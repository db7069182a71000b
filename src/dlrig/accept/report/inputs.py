"""The files `dlrig report` reads: any saved dlrig JSON document, or a monitor history.

A JSON file is recognised by its `schema` key (every dlrig document starts with it); a
SQLite file is a `monitor record --db` history, summarised by the monitor's own report and
read for its time series. Anything else is refused with one line naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlrig.accept.series import thin
from dlrig.errors import InputError
from dlrig.inputs import check_readable_file, read_json

MAX_JSON_BYTES = 200 * 1000 * 1000
HISTORY_SCHEMA = "dlrig.monitor.history"
SQLITE_MAGIC = b"SQLite format 3\x00"

KNOWN = {
    "dlrig.accept": "acceptance run",
    "dlrig.doctor": "doctor checks",
    "dlrig.machine": "machine snapshot",
    "dlrig.bench": "bench results",
    "dlrig.fit": "fit estimate",
    "dlrig.monitor.report": "monitor history report",
    "dlrig.monitor.sample": "monitor reading",
    HISTORY_SCHEMA: "monitor history",
}


@dataclass(frozen=True)
class Input:
    path: str
    schema: str
    document: dict[str, Any]

    @property
    def label(self) -> str:
        """The file and its folder: runs are told apart by their folders (run/accept.json)."""
        path = Path(self.path)
        return f"{path.parent.name}/{path.name}" if path.parent.name else path.name

    @property
    def kind(self) -> str:
        return KNOWN.get(self.schema, self.schema)


def load(path: str) -> Input:
    file = check_readable_file(path, "dlrig document")
    with file.open("rb") as stream:
        head = stream.read(len(SQLITE_MAGIC))
    if head == SQLITE_MAGIC:
        return Input(str(path), HISTORY_SCHEMA, history_document(str(path)))
    document = read_json(
        path,
        "dlrig document",
        MAX_JSON_BYTES,
        fix="give a file a dlrig command wrote with --json or --out, or a monitor --db",
    )
    schema = document.get("schema") if isinstance(document, dict) else None
    if schema not in KNOWN:
        raise InputError(
            f"{path}: not a dlrig document (schema {schema!r})",
            fix="give the --json output of accept, doctor, bench, fit or monitor report, a "
            "doctor --save snapshot, or a monitor --db history",
        )
    return Input(str(path), str(schema), document)


def history_document(path: str) -> dict[str, Any]:
    """A monitor history as a document: the monitor's report of it and its time series."""
    from dlrig.monitor import history
    from dlrig.monitor import report as history_report
    from dlrig.report import envelope

    summary = history_report.build(path).to_dict()
    conn = history.open_history(path)
    try:
        rows = conn.execute(
            "SELECT gpu, ts, utilization, sm_clock_mhz, power_watts, temperature_c "
            "FROM gpu_samples WHERE status = 'ok' ORDER BY gpu, ts"
        ).fetchall()
        host = conn.execute("SELECT ts, cpu_percent FROM host_samples ORDER BY ts").fetchall()
    finally:
        conn.close()
    start = min([r[1] for r in rows] + [h[0] for h in host], default=0.0)
    series: dict[int, dict[str, list[Any]]] = {}
    for gpu, ts, util, clock, power, temp in rows:
        entry = series.setdefault(
            int(gpu),
            {
                "t": [],
                "utilization_percent": [],
                "sm_clock_mhz": [],
                "power_watts": [],
                "temperature_c": [],
            },
        )
        entry["t"].append(round(float(ts) - start, 2))
        entry["utilization_percent"].append(util)
        entry["sm_clock_mhz"].append(clock)
        entry["power_watts"].append(power)
        entry["temperature_c"].append(temp)
    gpus = []
    for index, entry in sorted(series.items()):
        keep = thin(len(entry["t"]))
        gpus.append({"index": index, **{k: [v[i] for i in keep] for k, v in entry.items()}})
    keep = thin(len(host))
    return envelope(
        HISTORY_SCHEMA,
        1,
        {
            "path": path,
            "start_unix": start,
            "report": summary,
            "gpus": gpus,
            "host": {
                "t": [round(float(host[i][0]) - start, 2) for i in keep],
                "cpu_percent": [host[i][1] for i in keep],
            },
        },
    )

"""The files `dlrig report` reads: any saved dlrig JSON document, or a monitor history.

A JSON file is recognised by its `schema` key (every dlrig document starts with it); a
SQLite file is a `monitor record --db` history, summarised by the monitor's own report and
read for its time series. Anything else is refused with one line naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlrig.accept.report import facts as machine_facts
from dlrig.accept.series import thin
from dlrig.errors import InputError
from dlrig.inputs import check_readable_file, read_json
from dlrig.monitor import history, history_rows
from dlrig.monitor import report as history_report
from dlrig.report import envelope

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
    "dlrig.profile": "training-step profile",
}
# The newest schema_version of each document this dlrig reads (a test holds these to the
# writers' SCHEMA_VERSION constants). A newer document may mean something else by the same keys:
# it is refused, never read as if it were this version.
VERSIONS = {
    "dlrig.accept": 1,
    "dlrig.doctor": 1,
    "dlrig.machine": 1,
    "dlrig.bench": 1,
    "dlrig.fit": 2,
    "dlrig.monitor.report": 1,
    "dlrig.monitor.sample": 1,
    HISTORY_SCHEMA: 1,
    "dlrig.profile": 1,
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
    version = document.get("schema_version")
    newest = VERSIONS[str(schema)]
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= newest:
        raise InputError(
            f"{path}: {schema} schema_version {version!r} is not one this dlrig reads (1 to "
            f"{newest})",
            fix="read it with the dlrig that wrote it, or write it again with this one",
        )
    return Input(str(path), str(schema), document)


def machine_identity(item: Input) -> tuple[str | None, frozenset[str]]:
    """(hostname, GPU UUIDs) that the document says it was made on; (None, {}) where it
    does not say."""
    snapshot = machine_facts.machine_of(item.schema, item.document)
    host = None
    uuids: set[str] = set()
    if snapshot is not None:
        host = (snapshot.get("origin") or {}).get("hostname")
        uuids = {g["uuid"] for g in snapshot.get("gpus") or () if g.get("uuid")}
    if host is None and item.schema == "dlrig.accept":
        host = item.document.get("hostname")
    return host, frozenset(uuids)


def check_one_machine(inputs: list[Input]) -> None:
    """InputError naming two inputs of different machines (hostnames, or GPU sets that share
    no GPU); a page of one machine must not mix another's figures in silently."""
    groups = machines(inputs)
    if len(groups) > 1:
        (first, _), (second, _) = groups[:2]
        raise InputError(
            f"{first[0].path} and {second[0].path} are of different machines "
            f"({_difference(first[0], second[0])})",
            fix="make one page per machine, or pass --several-machines for one page that "
            "names each; to set two runs of one machine side by side use --compare",
        )


def _difference(one: Input, other: Input) -> str:
    host, _ = machine_identity(one)
    other_host, _ = machine_identity(other)
    if host and other_host and host != other_host:
        return f"hosts {host!r} and {other_host!r}"
    return "GPUs that share no UUID"


def machines(inputs: list[Input]) -> list[tuple[list[Input], str]]:
    """The inputs grouped by the machine they are of, each group with a name for it; inputs
    that do not say which machine join the first group."""
    groups: list[tuple[list[Input], str | None, set[str]]] = []
    unknown: list[Input] = []
    for item in inputs:
        host, uuids = machine_identity(item)
        if host is None and not uuids:
            unknown.append(item)
            continue
        for members, group_host, group_uuids in groups:
            same_host = host is None or group_host is None or host == group_host
            same_gpus = not uuids or not group_uuids or bool(uuids & group_uuids)
            if same_host and same_gpus:
                members.append(item)
                group_uuids.update(uuids)
                break
        else:
            groups.append(([item], host, set(uuids)))
    if not groups:
        return [(unknown, "")] if unknown else []
    groups[0][0].extend(unknown)
    return [(members, host or members[0].label) for members, host, _ in groups]


def history_document(path: str) -> dict[str, Any]:
    """A monitor history as a document: the monitor's report of it and its time series."""
    summary = history_report.build(path).to_dict()
    conn = history.open_history(path)
    try:
        rows = [row for row in history_rows.gpu_rows(conn) if row.status == "ok"]
        host = conn.execute("SELECT ts, cpu_percent FROM host_samples ORDER BY ts").fetchall()
    finally:
        conn.close()
    start = min([r.ts for r in rows] + [h[0] for h in host], default=0.0)
    series: dict[int, dict[str, list[Any]]] = {}
    for row in rows:
        entry = series.setdefault(
            int(row.gpu),
            {
                "t": [],
                "utilization_percent": [],
                "sm_clock_mhz": [],
                "power_watts": [],
                "temperature_c": [],
            },
        )
        entry["t"].append(round(float(row.ts) - start, 2))
        entry["utilization_percent"].append(row.utilization)
        entry["sm_clock_mhz"].append(row.sm_clock_mhz)
        entry["power_watts"].append(row.power_watts)
        entry["temperature_c"].append(row.temperature_c)
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

"""One health report in the words each consumer reads.

- node-problem-detector's custom plugin: exit 0 OK, 1 NonOK, anything else Unknown; stdout is
  the condition's message, cut at `max_output_length` (80 by default), so the first line says it
  all (kubernetes/node-problem-detector pkg/custompluginmonitor/plugin/plugin.go).
- Nagios/Icinga plugins: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; "SERVICE STATUS: text |
  perfdata" on the first line (Nagios plugin development guidelines).
- node_exporter's textfile collector: a `*.prom` file written whole (rename into place), gauges
  with HELP and TYPE.
"""

from __future__ import annotations

from dlrig.health import HealthReport

NPD_OUTPUT_CHARS = 80
NPD_EXIT = {"ok": 0, "warn": 0, "fault": 1, "unknown": 2}
NAGIOS_EXIT = {"ok": 0, "warn": 1, "fault": 2, "unknown": 3}
NAGIOS_WORD = {0: "OK", 1: "WARNING", 2: "CRITICAL", 3: "UNKNOWN"}


def summary(report: HealthReport) -> str:
    if report.status == "unknown":
        return f"unknown: {report.note or 'the check could not complete'}"
    if report.draining:
        first = report.draining[0]
        more = f" (+{len(report.draining) - 1})" if len(report.draining) > 1 else ""
        return f"{first.check}: {first.title}{more}"
    if report.faults:
        return f"warn: {report.faults[0].title}"
    return "healthy"


def npd(report: HealthReport) -> tuple[str, int]:
    """(the message, at most 80 characters, and the exit code) for node-problem-detector."""
    text = summary(report)
    if len(text) > NPD_OUTPUT_CHARS:
        text = text[: NPD_OUTPUT_CHARS - 1] + "…"
    return text, NPD_EXIT[report.status]


def nagios(report: HealthReport) -> tuple[str, int]:
    code = NAGIOS_EXIT[report.status]
    drains = len(report.draining)
    warns = len(report.faults) - drains
    perf = f"faults={drains};;1;0 warnings={warns};1;;0 seconds={report.seconds:.3f}s;;;0"
    return f"DLRIG HEALTH {NAGIOS_WORD[code]}: {summary(report)} | {perf}", code


def prometheus(report: HealthReport) -> str:
    """The textfile collector's metrics for this check."""
    status = {"ok": 0, "warn": 1, "fault": 2, "unknown": 3}[report.status]
    lines = [
        "# HELP dlrig_health_status Node health: 0 ok, 1 warnings, 2 a fault that drains, 3 unknown.",
        "# TYPE dlrig_health_status gauge",
        f'dlrig_health_status{{mode="{report.mode}"}} {status}',
        "# HELP dlrig_health_faults Faults found by the last check, by check and whether they drain.",
        "# TYPE dlrig_health_faults gauge",
    ]
    counts: dict[tuple[str, bool], int] = {}
    for fault in report.faults:
        counts[(fault.check, fault.drain)] = counts.get((fault.check, fault.drain), 0) + 1
    for (check, drain), count in sorted(counts.items()):
        lines.append(f'dlrig_health_faults{{check="{check}",drain="{str(drain).lower()}"}} {count}')
    lines += [
        "# HELP dlrig_health_check_seconds How long the last check took.",
        "# TYPE dlrig_health_check_seconds gauge",
        f"dlrig_health_check_seconds {report.seconds:.3f}",
    ]
    return "\n".join(lines) + "\n"

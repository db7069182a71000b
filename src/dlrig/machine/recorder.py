"""`dlrig monitor record --out FILE`: capture this machine's nvidia-smi outputs for replay.

The file uses the multi-section capture format of nvidia_gpu_exporter's captures (sections
between lines of 80 '#', headed "# <state> :: <what>" and "# $ <command>"), so captures made
here, there, and the ones in dlrig's own tests are read by the same code. A capture holds the
machine's static facts once ("capabilities") and any number of states ("idle", "load", ...);
recording another state into an existing file appends it.
"""

from __future__ import annotations

import platform
import re
import socket
from dataclasses import dataclass
from datetime import UTC, datetime

from dlrig import __version__
from dlrig.errors import DlrigError, InputError
from dlrig.machine.readers import nvsmi_capture
from dlrig.machine.runner import Runner, SubprocessRunner

SEPARATOR = nvsmi_capture.SEPARATOR

# Always valid fields; used when --help-query-gpu cannot be parsed.
CORE_FIELDS = (
    "timestamp,driver_version,count,name,serial,uuid,pci.bus_id,pcie.link.gen.current,"
    "pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,index,persistence_mode,"
    "fan.speed,pstate,clocks_event_reasons.active,memory.total,memory.used,memory.free,"
    "compute_cap,utilization.gpu,utilization.memory,ecc.mode.current,"
    "ecc.errors.corrected.volatile.total,ecc.errors.uncorrected.volatile.total,"
    "temperature.gpu,temperature.memory,power.draw,power.limit,power.default_limit,"
    "clocks.current.sm,clocks.current.memory,clocks.max.sm,clocks.max.memory,mig.mode.current"
)
COMPUTE_APPS = "timestamp,gpu_name,gpu_bus_id,gpu_serial,gpu_uuid,pid,process_name,used_gpu_memory"
_FIELD = re.compile(r'^"([A-Za-z0-9_.\[\]]+)"')
_STATE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")


@dataclass(frozen=True)
class Section:
    state: str
    what: str
    command: tuple[str, ...]
    body: str


def query_fields(help_text: str) -> list[str]:
    """The field names `nvidia-smi --help-query-gpu` lists (the first name of each entry)."""
    fields = []
    for line in help_text.splitlines():
        match = _FIELD.match(line.strip())
        if match and match.group(1) not in fields:
            fields.append(match.group(1))
    return fields


def _section_text(section: Section) -> str:
    return (
        f"{SEPARATOR}\n# {section.state} :: {section.what}\n# $ {' '.join(section.command)}\n"
        f"{SEPARATOR}\n{section.body.rstrip()}\n\n\n"
    )


def _run(runner: Runner, argv: tuple[str, ...], timeout_s: float) -> str:
    result = runner.run(argv, timeout_s)
    if result.error == "not found":
        raise DlrigError(
            "nvidia-smi is not installed or not on PATH, so there is nothing to record",
            fix="install the NVIDIA driver (it ships nvidia-smi), or run on the GPU machine",
        )
    if not result.ok:
        lines = (result.stderr or result.stdout).strip().splitlines()
        detail = result.error or (lines[0] if lines else f"exit code {result.returncode}")
        raise DlrigError(
            f"`{' '.join(argv)}` failed: {detail}",
            fix="check `nvidia-smi` works on this machine (`dlrig doctor` says why not)",
        )
    return result.stdout


def record(
    state: str,
    existing: str | None = None,
    runner: Runner | None = None,
    timeout_s: float = 30.0,
) -> str:
    """The capture text with `state` added (to `existing`, when appending)."""
    if not _STATE.match(state):
        raise InputError(
            f"--state {state!r} is not a state name",
            fix="use lower-case letters, digits and '-', e.g. idle, load, training",
        )
    runner = runner or SubprocessRunner()
    header = ""
    if existing is not None:
        if not nvsmi_capture.looks_like(existing):
            raise InputError(
                "the file exists and is not an nvidia-smi capture",
                fix="record to a new file, or remove it first",
            )
        _, parsed = nvsmi_capture.split_sections(existing)
        if state in nvsmi_capture.states(parsed):
            raise InputError(
                f"the capture already has a state {state!r}",
                fix="pick another --state name, or record to a new file",
            )
    smi = "nvidia-smi"
    parts: list[Section] = []
    if existing is None:
        version = _run(runner, (smi, "--version"), timeout_s)
        help_text = _run(runner, (smi, "--help-query-gpu"), timeout_s)
        fields = query_fields(help_text)
        parts += [
            Section("capabilities", "version", (smi, "--version"), version),
            Section("capabilities", "help-query-gpu", (smi, "--help-query-gpu"), help_text),
            Section("capabilities", "list (-L)", (smi, "-L"), _run(runner, (smi, "-L"), timeout_s)),
        ]
        topo = runner.run((smi, "topo", "-m"), timeout_s)
        if topo.ok:
            parts.append(Section("capabilities", "topo -m", (smi, "topo", "-m"), topo.stdout))
        nvlink = runner.run((smi, "nvlink", "-s"), timeout_s)
        if nvlink.ok:
            parts.append(Section("capabilities", "nvlink -s", (smi, "nvlink", "-s"), nvlink.stdout))
        parts.append(
            Section(
                "capabilities",
                "query-gpu field list (derived, used for query-gpu above)",
                (smi, "--help-query-gpu"),
                "\n".join(fields),
            )
        )
    else:
        _, parsed = nvsmi_capture.split_sections(existing)
        listed = next((s for s in parsed if s.what.startswith("query-gpu field list")), None)
        fields = listed.body.split() if listed else []
    query = ",".join(fields) if fields else CORE_FIELDS
    query_argv = (smi, f"--query-gpu={query}", "--format=csv")
    csv = runner.run(query_argv, timeout_s)
    if not csv.ok:  # a field this driver rejects: fall back to the core set
        query_argv = (smi, f"--query-gpu={CORE_FIELDS}", "--format=csv")
        csv_text = _run(runner, query_argv, timeout_s)
    else:
        csv_text = csv.stdout
    apps_argv = (smi, f"--query-compute-apps={COMPUTE_APPS}", "--format=csv")
    parts += [
        Section(state, "nvidia-smi (default table)", (smi,), _run(runner, (smi,), timeout_s)),
        Section(state, "query (-q)", (smi, "-q"), _run(runner, (smi, "-q"), timeout_s)),
        Section(state, "query-gpu (csv, what the exporter parses)", query_argv, csv_text),
        Section(
            state, "query-compute-apps (per-process)", apps_argv, _run(runner, apps_argv, timeout_s)
        ),
    ]
    # Per-process SM and encoder/decoder use (five one-second samples, as the published
    # captures hold); a GPU or driver without it just has no such section.
    pmon_argv = (smi, "pmon", "-c", "5")
    pmon = runner.run(pmon_argv, timeout_s + 5)
    if pmon.ok:
        parts.append(Section(state, "pmon (per-process monitor)", pmon_argv, pmon.stdout))
    if existing is None:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        header = (
            f"{SEPARATOR}\n# nvidia-smi capture recorded by dlrig {__version__} "
            "(dlrig monitor record)\n"
            f"{SEPARATOR}\n"
            f"collected_at:   {now}\n"
            f"hostname:       {socket.gethostname()}\n"
            f"os:             {platform.system().lower()} ({_os_name()})\n"
            f"kernel:         {platform.release()}\n"
            f"arch:           {platform.machine()}\n\n\n"
        )
        return header + "".join(_section_text(p) for p in parts)
    return existing.rstrip("\n") + "\n\n\n" + "".join(_section_text(p) for p in parts)


def _os_name() -> str:
    try:
        with open("/etc/os-release", encoding="utf-8") as stream:
            for line in stream:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()

"""`dlrig health`: should this node get jobs? The node health check of Slurm and Kubernetes.

    from dlrig import health
    report = health.run(health.HealthOptions(mode="periodic"))
    report.status            # "ok" | "warn" | "fault" | "unknown"
    report.drain_reason      # "dlrig: gpu.xid: Xid 79 (GPU has fallen off the bus) x1 on ..."

Modes: `periodic` (cheap: NVML and the kernel log, no GPU allocated), `prolog` (the same before a
job), `epilog` (after a job, also processes and memory left on the GPUs). Invasive tests belong
to `dlrig accept`. The whole check runs under a hard wall-clock budget, well below Slurm's 60 s
kill: a hung NVML call or filesystem makes the answer "unknown", never a hang.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from dlrig.health import checks, state
from dlrig.health.checks import Fault
from dlrig.machine.model import Machine
from dlrig.machine.probe import collect_health
from dlrig.report import Progress, envelope, no_progress

__all__ = ["Fault", "HealthOptions", "HealthReport", "run"]

SCHEMA_VERSION = 1
Mode = Literal["periodic", "prolog", "epilog"]
MODES: tuple[Mode, ...] = ("periodic", "prolog", "epilog")
MODE_BY_NAME: dict[str, Mode] = {mode: mode for mode in MODES}
NodeStatus = Literal["ok", "warn", "fault", "unknown"]  # the node, not one finding
# The reason Slurm shows is cut to this many characters (scontrol keeps longer ones, sinfo's
# default column does not; a reason should read whole in `sinfo -R`).
REASON_CHARS = 120
DRAIN_PREFIX = "dlrig:"


@dataclass(frozen=True)
class HealthOptions:
    mode: Mode = "periodic"
    budget_s: float = 20.0  # the whole check, probe included (Slurm kills at 60 s)
    expect_gpus: int | None = None  # GPUs this node must show (a missing one drains it)
    state_path: Path | None = None  # what the last check read; None: nothing remembered
    busy_percent: float = 10.0  # a GPU at least this busy is judged as busy (PCIe generation)
    clear: bool = False  # forget open faults (a person fixed what the log showed)


@dataclass(frozen=True)
class HealthReport:
    mode: Mode
    status: NodeStatus
    faults: tuple[Fault, ...]
    source: str  # "live" or the recorded files
    seconds: float
    note: str | None = None
    hostname: str | None = None
    checked: tuple[str, ...] = field(default_factory=tuple)

    @property
    def draining(self) -> tuple[Fault, ...]:
        return tuple(f for f in self.faults if f.drain)

    @property
    def drain_reason(self) -> str | None:
        """Slurm's reason for the first fault that drains: "dlrig: <check>: <what>"."""
        if not self.draining:
            return None
        first = self.draining[0]
        more = f" (+{len(self.draining) - 1} more)" if len(self.draining) > 1 else ""
        text = f"{DRAIN_PREFIX} {first.check}: {first.title}{more}"
        return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"

    def to_dict(self) -> dict[str, Any]:
        return envelope(
            "dlrig.health",
            SCHEMA_VERSION,
            {
                "mode": self.mode,
                "status": self.status,
                "drain": bool(self.draining),
                "drain_reason": self.drain_reason,
                "faults": [f.to_dict() for f in self.faults],
                "checked": list(self.checked),
                "source": self.source,
                "hostname": self.hostname,
                "seconds": round(self.seconds, 3),
                "note": self.note,
            },
        )


CHECKED = (
    "driver (module vs libraries, GPUs on the bus)",
    "GPU count",
    "uncorrectable ECC, page retirement, row remapping",
    "PCIe width, generation while busy",
    "NVLink active on NVLink GPUs (fabric manager)",
    "Xid events of this boot",
)


def evaluate(
    machine: Machine, options: HealthOptions, previous: state.State
) -> tuple[list[Fault], state.State]:
    """The faults of this snapshot, and the state to remember. Pure."""
    boot = machine.origin.boot_id
    events = machine.kernel_log.xid_events if machine.kernel_log else ()
    if boot and previous.boot_id and boot != previous.boot_id:
        previous = state.State(boot_id=boot)  # a new boot: a new kernel log, no open fault
    if options.clear:
        # A person fixed what the log showed: its faults close and its lines stay read.
        previous = state.State(boot_id=boot, seen=frozenset(checks.event_key(e) for e in events))
    if boot is None:
        # A recorded input has no boot to remember: its events are its state, read afresh.
        new_events = list(events)
        remembered: tuple[Fault, ...] = ()
    else:
        new_events = [e for e in events if checks.event_key(e) not in previous.seen]
        remembered = previous.open_faults
    xid = checks.xid_faults(new_events)
    opened = [f for f in xid if f.drain]
    faults = [
        *checks.driver_faults(machine),
        *checks.gpu_faults(machine, options.expect_gpus, options.busy_percent),
        *checks.fabric_faults(machine),
        *remembered,
        *xid,
    ]
    if options.mode == "epilog":
        faults += checks.leaked_memory_faults(machine)
    after = state.State(
        boot_id=boot,
        seen=previous.seen | {checks.event_key(e) for e in events} if boot else frozenset(),
        open_faults=(*remembered, *opened) if boot else (),
    )
    return faults, after


def _status(faults: list[Fault]) -> NodeStatus:
    if any(f.drain for f in faults):
        return "fault"
    return "warn" if faults else "ok"


def run(
    options: HealthOptions | None = None,
    *,
    machine: Machine | None = None,
    collect: Callable[[float], Machine] | None = None,
    progress: Progress = no_progress,
) -> HealthReport:
    """Check this node (or the recorded `machine`) within `options.budget_s`.

    `collect(deadline_s)` reads the live machine (the default is the health probe of
    `dlrig.machine.probe`); it runs in a worker thread, so a probe stuck past the budget makes
    the report "unknown" instead of holding the caller."""
    options = options or HealthOptions()
    started = time.monotonic()
    if machine is None:
        progress("health: reading the node", 0.0)
        if collect is None:

            def collect(deadline_s: float) -> Machine:
                return collect_health(deadline_s=deadline_s)

        machine = _within_budget(collect, options.budget_s)
        if machine is None:
            return HealthReport(
                options.mode,
                "unknown",
                (),
                "live",
                time.monotonic() - started,
                note=f"the probe did not finish within the {options.budget_s:g} s budget "
                "(a hung NVML call or filesystem)",
                checked=CHECKED,
            )
    progress("health: judging", 0.5)
    previous = state.load(options.state_path)
    faults, after = evaluate(machine, options, previous)
    unsaved = state.save(options.state_path, after)
    source = "live" if machine.origin.kind == "live" else (machine.origin.path or "recorded")
    unreadable = [i for i in machine.probe_issues if "did not finish" in i.reason]
    if machine.origin.kind == "live" and machine.kernel_log is None:
        # Without the kernel log no Xid was checked: said as a warning, never as healthy.
        why = next((i.reason for i in machine.probe_issues if i.source == "kernel_log"), "")
        faults.append(
            Fault.of(
                "health.kernel_log",
                "the kernel log could not be read: Xid errors were not checked",
                (why,) if why else (),
                drain=False,
            )
        )
    notes = [f"{i.source}: {i.reason}" for i in unreadable] + ([unsaved] if unsaved else [])
    note = "; ".join(notes) or None
    status = _status(faults)
    if unreadable and status != "fault":
        status = "unknown"  # what could not be read was not judged healthy
    return HealthReport(
        options.mode,
        status,
        tuple(faults),
        source,
        time.monotonic() - started,
        note=note,
        hostname=machine.origin.hostname,
        checked=CHECKED,
    )


def _within_budget(collect: Callable[[float], Machine], budget_s: float) -> Machine | None:
    """`collect` in a daemon thread; None when it is not back in time (the thread is left)."""
    box: list[Machine] = []
    failure: list[BaseException] = []
    # The probe's own deadline leaves room to judge and answer inside the budget.
    inner = max(0.5, budget_s * 0.8)

    def work() -> None:
        try:
            box.append(collect(inner))
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            failure.append(exc)

    worker = threading.Thread(target=work, name="dlrig-health-probe", daemon=True)
    worker.start()
    worker.join(budget_s * 0.9)
    if failure:
        raise failure[0]
    return box[0] if box else None

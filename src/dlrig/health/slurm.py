"""Speaking Slurm's health-check contract: the node drains itself, with a reason that says why.

`HealthCheckProgram` runs as root on every node (and at slurmd's start), is killed after 60 s
and must act itself: `scontrol update NodeName=N State=DRAIN Reason="dlrig: <check>: <what>"`.
A node dlrig drained is resumed once its faults are gone; a reason a person set is never
overwritten or resumed (LBNL NHC's rule, `node-mark-offline`).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Literal

from dlrig.errors import DlrigError, InputError
from dlrig.health import DRAIN_PREFIX, HealthReport
from dlrig.machine.runner import Runner, SubprocessRunner

TIMEOUT_S = 8.0  # scontrol's own MessageTimeout is 10 s; the check must end well before 60
DRAINED = ("DRAIN", "DRAINED", "DRAINING", "DRNG")


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # "IDLE", "MIXED+DRAIN", ...
    reason: str | None

    @property
    def drained(self) -> bool:
        return any(part in DRAINED for part in self.state.upper().replace("*", "").split("+"))

    @property
    def drained_by_dlrig(self) -> bool:
        return self.drained and (self.reason or "").startswith(DRAIN_PREFIX)


@dataclass(frozen=True)
class Action:
    kind: Literal["drain", "resume", "keep"]
    why: str
    reason: str | None = None  # for a drain


def node_name(given: str | None) -> str:
    """The Slurm node this runs for: --node, SLURMD_NODENAME (slurmd sets it for the health
    check), else the short host name."""
    return given or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def decide(report: HealthReport, node: NodeState) -> Action:
    """What to do with `node` after this check. Pure."""
    reason = report.drain_reason
    if report.status == "unknown" and not node.drained:
        # A node that cannot be checked (NVML hung, the kernel log unreadable) must not get jobs.
        why = report.note or "the check could not read the node"
        text = f"{DRAIN_PREFIX} health: {why}"
        return Action("drain", "the check could not complete", text[:120])
    if reason:
        if node.drained and not node.drained_by_dlrig:
            return Action("keep", f"already drained by a person ({node.reason!r}): left as it is")
        if node.drained_by_dlrig and node.reason == reason:
            return Action("keep", "already drained for this fault")
        return Action("drain", report.draining[0].title, reason)
    if node.drained_by_dlrig and report.status in ("ok", "warn"):
        return Action("resume", f"the fault is gone (was: {node.reason})")
    if node.drained:
        return Action("keep", f"drained by a person ({node.reason!r}): left as it is")
    return Action("keep", "healthy" if report.status == "ok" else "warnings only: not drained")


class Slurm:
    """`scontrol`, through the machine layer's command runner."""

    def __init__(self, runner: Runner | None = None) -> None:
        self.runner = runner or SubprocessRunner()

    def _scontrol(self, *args: str) -> str:
        result = self.runner.run(["scontrol", *args], TIMEOUT_S)
        if result.error == "not found":
            raise InputError(
                "--slurm: scontrol is not installed here",
                fix="run on a Slurm node (HealthCheckProgram), or drop --slurm",
            )
        if not result.ok:
            message = (result.stderr or result.error or "").strip().splitlines()
            text = message[-1] if message else f"exit {result.returncode}"
            if result.error or "contact slurm controller" in text.lower() or "slurm.conf" in text:
                raise InputError(
                    f"--slurm: no Slurm controller answers ({text})",
                    fix="run on a node of a running cluster (scontrol ping), or drop --slurm",
                )
            if (
                "permission" in text.lower()
                or "access" in text.lower()
                or "authoriz" in text.lower()
            ):
                raise InputError(
                    f"--slurm: scontrol {' '.join(args[:2])}: not allowed ({text})",
                    fix="run as root or SlurmUser (HealthCheckProgram runs as root)",
                )
            raise DlrigError(
                f"scontrol {' '.join(args)}: {text}", fix="check slurmctld (scontrol ping)"
            )
        return result.stdout

    def node(self, name: str) -> NodeState:
        text = self._scontrol("show", "node", name, "-o")
        fields: dict[str, str] = {}
        # "Reason=dlrig: gpu.xid: Xid 79 ... [root@2026-12-02T06:00:00]" holds spaces: it is the
        # text up to the next "Key=" token.
        current = None
        for token in text.strip().split(" "):
            key, sep, value = token.partition("=")
            if sep and key and key[0].isupper() and key.replace("_", "").isalnum():
                current = key
                fields[key] = value
            elif current:
                fields[current] += " " + token
        if "NodeName" not in fields:
            raise InputError(f"--slurm: no node {name!r} in this cluster", fix="give --node NAME")
        reason = fields.get("Reason")
        if reason and reason.endswith("]") and " [" in reason:
            reason = reason[: reason.rindex(" [")]  # "[user@time]" is who set it, not the reason
        return NodeState(name, fields.get("State", ""), reason or None)

    def apply(self, name: str, action: Action) -> None:
        if action.kind == "drain":
            self._scontrol("update", f"NodeName={name}", "State=DRAIN", f"Reason={action.reason}")
        elif action.kind == "resume":
            self._scontrol("update", f"NodeName={name}", "State=RESUME")

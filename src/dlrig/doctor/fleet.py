"""`dlrig doctor --fleet`: the same doctor on every node, and what differs between them.

Either fans out over a Slurm cluster (`srun`, one task per responding node, each running
`dlrig doctor --json`) or reads saved reports/snapshots, one per node. Then it compares the
facts that must agree across a training cluster (driver, CUDA, torch, GPU count and model,
PCIe links, ECC, NCCL settings) and the doctor checks, and names the odd node out: the node
whose value differs from the majority, and the checks that fail only there. Drained or down
nodes are odd too: a job cannot use them.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlrig.errors import DlrigError, InputError

SCHEMA = "dlrig.doctor.fleet"
SCHEMA_VERSION = 1
_MARK = "@@dlrig-node "


@dataclass(frozen=True)
class NodeResult:
    node: str
    report: dict[str, Any] | None  # a `doctor --json` document
    state: str = "ok"  # ok | drained | down | failed
    detail: str | None = None


@dataclass(frozen=True)
class Difference:
    attribute: str
    values: dict[str, str]  # node -> value ("unset" when absent)
    majority: str | None
    odd_nodes: tuple[str, ...]


@dataclass(frozen=True)
class CheckDifference:
    check: str
    title: str
    statuses: dict[str, str]  # node -> ok | warn | fail | ...
    failing_nodes: tuple[str, ...]
    evidence: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FleetReport:
    nodes: tuple[NodeResult, ...]
    differences: tuple[Difference, ...]
    checks: tuple[CheckDifference, ...]

    @property
    def odd_nodes(self) -> tuple[str, ...]:
        found: list[str] = []
        for node in self.nodes:
            if node.state != "ok":
                found.append(node.node)
        for difference in self.differences:
            found.extend(difference.odd_nodes)
        for check in self.checks:
            found.extend(check.failing_nodes)
        return tuple(dict.fromkeys(found))

    @property
    def problem(self) -> bool:
        return bool(self.odd_nodes)

    def to_dict(self) -> dict[str, Any]:
        from dlrig.report import envelope

        return envelope(
            SCHEMA,
            SCHEMA_VERSION,
            {
                "nodes": [
                    {
                        "node": n.node,
                        "state": n.state,
                        "detail": n.detail,
                        "failed_checks": _failed(n.report),
                    }
                    for n in self.nodes
                ],
                "odd_nodes": list(self.odd_nodes),
                "differences": [
                    {
                        "attribute": d.attribute,
                        "values": d.values,
                        "majority": d.majority,
                        "odd_nodes": list(d.odd_nodes),
                    }
                    for d in self.differences
                ],
                "checks": [
                    {
                        "check": c.check,
                        "title": c.title,
                        "statuses": c.statuses,
                        "failing_nodes": list(c.failing_nodes),
                        "evidence": c.evidence,
                    }
                    for c in self.checks
                ],
            },
        )


def _failed(report: dict[str, Any] | None) -> list[str]:
    if not report:
        return []
    return [c["id"] for c in report.get("checks", []) if c.get("status") == "fail"]


# --- facts compared across nodes -----------------------------------------------------------


def _get(document: dict[str, Any] | None, *path: str) -> Any:
    value: Any = document
    for key in path:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _gpu_summary(gpus: list[dict[str, Any]] | None, key: str) -> str | None:
    if gpus is None:
        return None
    counts = Counter(key_of(gpu, key) for gpu in gpus)
    return ", ".join(f"{n}x {value}" for value, n in sorted(counts.items())) or "none"


def key_of(gpu: dict[str, Any], key: str) -> str:
    if key == "pcie":
        link = gpu.get("pcie") or {}
        return f"gen{link.get('gen_max', '?')} x{link.get('width_max', '?')}"
    if key == "ecc":
        enabled = gpu.get("ecc_mode_enabled")
        errors = (gpu.get("ecc_errors") or {}).get("volatile_uncorrected")
        text = {True: "ECC on", False: "ECC off", None: "ECC unknown"}[enabled]
        return text + (f" ({errors} uncorrected)" if errors else "")
    return str(gpu.get(key))


def facts_of(report: dict[str, Any]) -> dict[str, str]:
    """The comparable facts of one node's doctor report (absent -> 'unset')."""
    machine = report.get("machine") or {}
    gpus = machine.get("gpus")
    torch = _get(machine, "frameworks", "torch") or {}
    facts = {
        "os": _get(machine, "os", "name"),
        "kernel": _get(machine, "os", "kernel_release"),
        "driver": _get(machine, "driver", "version"),
        "driver CUDA": _get(machine, "driver", "cuda_version"),
        "CUDA toolkit (nvcc)": _get(machine, "cuda_toolkit", "nvcc_version"),
        "torch": torch.get("version"),
        "torch CUDA": torch.get("cuda_version"),
        "GPU count": str(len(gpus)) if gpus is not None else None,
        "GPU model": _gpu_summary(gpus, "name"),
        "PCIe links": _gpu_summary(gpus, "pcie"),
        "ECC": _gpu_summary(gpus, "ecc"),
    }
    nccl = machine.get("nccl") or {}
    settings: dict[str, str] = {}
    for key, value in nccl.get("conf") or ():
        settings[key] = f"{value} (nccl.conf)"
    for key, value in (nccl.get("env") or ()) or (machine.get("env") or ()):
        if key.startswith("NCCL_"):
            settings[key] = f"{value} (environment)"
    for key, value in settings.items():
        facts[key] = value
    return {k: str(v) for k, v in facts.items() if v is not None}


def compare(nodes: Sequence[NodeResult]) -> FleetReport:
    reporting = [n for n in nodes if n.report is not None]
    per_node = {n.node: facts_of(n.report) for n in reporting if n.report is not None}
    attributes = sorted({key for facts in per_node.values() for key in facts})
    differences = []
    for attribute in attributes:
        values = {node: facts.get(attribute, "unset") for node, facts in per_node.items()}
        if len(set(values.values())) <= 1:
            continue
        counts = Counter(values.values()).most_common()
        majority = counts[0][0] if len(counts) == 1 or counts[0][1] > counts[1][1] else None
        odd = tuple(
            node for node, value in values.items() if majority is not None and value != majority
        )
        if majority is None and len(values) == 2:
            # Two nodes, two values: the one whose value is "unset" is not the odd one; the one
            # that set something different is.
            unset = [n for n, v in values.items() if v == "unset"]
            odd = tuple(n for n in values if n not in unset) if len(unset) == 1 else tuple(values)
        differences.append(Difference(attribute, values, majority, odd))
    checks = []
    ids: dict[str, str] = {}
    from dlrig import doctor

    for node in reporting:
        for check in (node.report or {}).get("checks", []):
            entry = doctor.get(check["id"])
            ids.setdefault(check["id"], entry.title if entry else check["id"])
    for check_id, title in ids.items():
        statuses: dict[str, str] = {}
        evidence: dict[str, str] = {}
        for node in reporting:
            for check in (node.report or {}).get("checks", []):
                if check["id"] == check_id:
                    statuses[node.node] = check["status"]
                    if check["status"] in {"fail", "warn"}:
                        evidence[node.node] = check.get("title", "")
        if len(set(statuses.values())) <= 1:
            continue
        failing = tuple(n for n, s in statuses.items() if s in {"fail", "warn"})
        if failing and len(failing) < len(statuses):
            checks.append(CheckDifference(check_id, title, statuses, failing, evidence))
    return FleetReport(nodes=tuple(nodes), differences=tuple(differences), checks=tuple(checks))


# --- where the reports come from -----------------------------------------------------------


def from_paths(spec: str) -> FleetReport:
    """Saved `doctor --json` reports or snapshots: a folder of *.json, a file, or a comma list."""
    from dlrig import doctor
    from dlrig.machine import readers

    paths: list[Path] = []
    for part in [p for p in spec.split(",") if p]:
        path = Path(part)
        if path.is_dir():
            paths.extend(sorted(path.glob("*.json")))
        elif path.exists():
            paths.append(path)
        else:
            raise InputError(
                f"--fleet {part}: no such file or folder",
                fix="give a folder of per-node snapshots or reports",
            )
    if len(paths) < 2:
        raise InputError(
            f"--fleet {spec}: {len(paths)} node file(s); comparing needs two or more",
            fix="save one `dlrig doctor --save NODE.json` per node",
        )
    nodes = []
    for path in paths:
        machine = readers.load(path)
        report = doctor.run(machine).to_dict()
        name = (
            machine.origin.hostname
            if machine.origin.hostname and machine.origin.kind == "live"
            else path.stem
        )
        nodes.append(NodeResult(node=name, report=report))
    names = [n.node for n in nodes]
    if len(set(names)) != len(names):  # several snapshots of one host name: name them by file
        nodes = [
            NodeResult(node=p.stem, report=n.report) for p, n in zip(paths, nodes, strict=True)
        ]
    return compare(nodes)


def _run(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise InputError(
            f"--fleet: {argv[0]} is not installed here",
            fix="run it on a Slurm login node, or give --fleet DIR of saved snapshots",
        ) from None
    except subprocess.TimeoutExpired:
        raise DlrigError(
            f"--fleet: {argv[0]} did not finish in {timeout_s:g} s",
            fix="check the cluster (sinfo), or raise --timeout",
        ) from None


def node_states(timeout_s: float = 30) -> dict[str, tuple[str, str]]:
    """node -> (Slurm state, reason) from sinfo."""
    result = _run(["sinfo", "-h", "-N", "-o", "%N|%t|%E"], timeout_s)
    if result.returncode != 0:
        raise DlrigError(
            f"sinfo failed: {result.stderr.strip()}",
            fix="check that slurmctld answers (scontrol ping)",
        )
    states: dict[str, tuple[str, str]] = {}
    for line in result.stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 2 and parts[0]:
            states.setdefault(
                parts[0], (parts[1].strip(), parts[2].strip() if len(parts) > 2 else "")
            )
    return states


def via_srun(
    dlrig_command: Sequence[str] | None = None, timeout_s: float = 120, partition: str | None = None
) -> FleetReport:
    """`dlrig doctor --json` on every node that can run a job, one srun task per node."""
    command = list(dlrig_command or (sys.executable, "-m", "dlrig.cli.main"))
    states = node_states()
    usable = [
        n
        for n, (state, _) in states.items()
        if not state.startswith(("drain", "drng", "down", "fail", "maint", "unk"))
    ]
    nodes: list[NodeResult] = []
    for name, (state, reason) in states.items():
        if name not in usable:
            kind = "drained" if state.startswith(("drain", "drng")) else "down"
            nodes.append(
                NodeResult(
                    name,
                    None,
                    kind,
                    f"Slurm state {state}" + (f": {reason}" if reason and reason != "none" else ""),
                )
            )
    if usable:
        argv = [
            "srun",
            f"--nodes={len(usable)}",
            "--ntasks-per-node=1",
            f"--nodelist={','.join(usable)}",
            "--kill-on-bad-exit=0",
            "--label",
        ]
        if partition:
            argv.append(f"--partition={partition}")
        inner = f'printf "{_MARK}%s\\n" "$SLURMD_NODENAME"; exec {" ".join(shlex.quote(c) for c in command)} doctor --json --no-kernel-log'
        result = _run([*argv, "sh", "-c", inner], timeout_s)
        nodes.extend(_parse_fanout(result.stdout, usable, result.stderr))
    return compare(sorted(nodes, key=lambda n: n.node))


def _parse_fanout(stdout: str, expected: Sequence[str], stderr: str) -> list[NodeResult]:
    """Tasks' lines interleave: `--label` prefixes each with its task id ("0: "), and each
    task's first line names its node; each task prints one JSON document."""
    task_lines: dict[str, list[str]] = {}
    task_node: dict[str, str] = {}
    for line in stdout.splitlines():
        task, sep, text = line.partition(": ")
        if not sep or not task.strip().isdigit():
            continue
        task = task.strip()
        if text.startswith(_MARK) and task not in task_node:
            task_node[task] = text[len(_MARK) :].strip()
            continue
        task_lines.setdefault(task, []).append(text)
    chunks = {node: task_lines.get(task, []) for task, node in task_node.items()}
    results = []
    for node in expected:
        if node not in chunks:
            results.append(
                NodeResult(
                    node,
                    None,
                    "failed",
                    "no output from srun: " + (stderr.strip().splitlines() or ["?"])[-1],
                )
            )
            continue
        text = "\n".join(chunks[node])
        try:
            results.append(NodeResult(node, json.loads(text)))
        except json.JSONDecodeError as exc:
            results.append(
                NodeResult(node, None, "failed", f"unreadable doctor output ({exc.msg})")
            )
    return results


def render_text(report: FleetReport, out: Any) -> None:
    out.print(f"[bold]dlrig doctor --fleet[/bold]: {len(report.nodes)} node(s)")
    for node in report.nodes:
        failed = _failed(node.report)
        line = f"  {node.node}: {node.state}" + (f" ({node.detail})" if node.detail else "")
        if failed:
            line += " — failing: " + ", ".join(failed)
        out.print(line)
    if report.differences:
        out.print()
        out.print("[bold]differences[/bold]")
        for difference in report.differences:
            values = "; ".join(f"{n}={v}" for n, v in difference.values.items())
            odd = f" — odd: {', '.join(difference.odd_nodes)}" if difference.odd_nodes else ""
            out.print(f"  {difference.attribute}: {values}{odd}")
    if report.checks:
        out.print()
        out.print("[bold]checks that differ[/bold]")
        for check in report.checks:
            states = "; ".join(f"{n}={s}" for n, s in check.statuses.items())
            out.print(
                f"  {check.check} ({check.title}): {states} — fails on {', '.join(check.failing_nodes)}"
            )
            for name, text in check.evidence.items():
                out.print(f"    {name}: {text}", style="dim")
    out.print()
    if report.odd_nodes:
        out.print(f"[bold red]odd node(s) out: {', '.join(report.odd_nodes)}[/bold red]")
    else:
        out.print("[green]all nodes agree[/green]")


def run_command(spec: str, as_json: bool, timeout_s: float) -> None:
    """The CLI's --fleet: exit 1 when a node is odd (differs, fails a check others pass, or is
    drained/down), 0 when every node agrees."""
    from dlrig.cli.common import console, print_json

    report = via_srun(timeout_s=max(60.0, timeout_s * 6)) if spec == "srun" else from_paths(spec)
    if as_json:
        print_json(report.to_dict())
    else:
        render_text(report, console())
    if report.problem:
        sys.exit(1)

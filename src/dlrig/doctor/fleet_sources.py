"""Where `dlrig doctor --fleet` gets each node's report: `srun` on a Slurm cluster (one task per
responding node, each running `dlrig doctor --json`), or saved reports/snapshots."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from dlrig import doctor
from dlrig.doctor.fleet_compare import FleetReport, NodeResult, NodeState, compare
from dlrig.errors import InputError
from dlrig.machine import readers

_MARK = "@@dlrig-node "


def from_paths(spec: str) -> FleetReport:
    """Saved `doctor --json` reports or snapshots: a folder of *.json, a file, or a comma list."""
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
        report = doctor.run(machine=machine).to_dict()
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
        raise InputError(
            f"--fleet: {argv[0]} did not finish in {timeout_s:g} s (no Slurm controller answers?)",
            fix="run it where `scontrol ping` answers, or give --fleet DIR of saved snapshots",
        ) from None


def node_states(timeout_s: float = 30) -> dict[str, tuple[str, str]]:
    """node -> (Slurm state, reason) from sinfo."""
    result = _run(["sinfo", "-h", "-N", "-o", "%N|%t|%E"], timeout_s)
    if result.returncode != 0:
        # No controller, no slurm.conf: the user asked for Slurm where there is none (exit 2),
        # not nodes that disagree (exit 1).
        lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
        raise InputError(
            f"--fleet srun: sinfo failed ({lines[-1] if lines else f'exit {result.returncode}'})",
            fix="run it where `scontrol ping` answers, or give --fleet DIR of saved snapshots",
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
            kind: NodeState = "drained" if state.startswith(("drain", "drng")) else "down"
            # `dlrig health --slurm` writes "dlrig: <check>: <fault>": say it was dlrig's doing.
            by = (
                "drained by dlrig health" if reason.startswith("dlrig:") else f"Slurm state {state}"
            )
            nodes.append(
                NodeResult(
                    name,
                    None,
                    kind,
                    by + (f": {reason}" if reason and reason != "none" else ""),
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

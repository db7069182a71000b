"""What the Slurm controller says about its nodes, for files generated for it (`provision
launch --scheduler slurm`): a job that asks for more CPUs per node than a node has is never
scheduled, so the request is capped by what `sinfo` reports."""

from __future__ import annotations

import re

from dlrig.machine.runner import Runner, SubprocessRunner

_CPUS = re.compile(r"^\s*(\d+)")


def smallest_node_cpus(
    partition: str | None = None, runner: Runner | None = None, timeout_s: float = 10.0
) -> int | None:
    """The CPU count of the smallest node in `partition`, or in the default partition (the
    one sbatch uses without -p, marked "*" by sinfo) when None; None where sinfo is not
    installed or does not answer.

    `sinfo -o "%P %c"` prints one line per partition and node group: "gpu* 64", or "32+" where
    the group's nodes differ (the "+" after the smallest)."""
    runner = runner or SubprocessRunner()
    if runner.which("sinfo") is None:
        return None
    result = runner.run(["sinfo", "-h", "-o", "%P %c"], timeout_s)
    if not result.ok:
        return None
    rows: list[tuple[str, bool, int]] = []
    for line in result.stdout.splitlines():
        name, _, cpus = line.strip().partition(" ")
        match = _CPUS.match(cpus)
        if name and match:
            rows.append((name.rstrip("*"), name.endswith("*"), int(match.group(1))))
    if partition is not None:
        chosen = [cpus for name, _, cpus in rows if name == partition]
    else:
        chosen = [cpus for _, default, cpus in rows if default] or [cpus for *_, cpus in rows]
    return min(chosen) if chosen else None

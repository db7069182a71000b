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
    """The CPU count of the partition's smallest node (all partitions when None); None where
    sinfo is not installed or does not answer.

    `sinfo -o %c` prints one line per node group: "64", or "32+" where nodes differ (the "+"
    after the smallest)."""
    runner = runner or SubprocessRunner()
    if runner.which("sinfo") is None:
        return None
    argv = ["sinfo", "-h", "-o", "%c"] + (["-p", partition] if partition else [])
    result = runner.run(argv, timeout_s)
    if not result.ok:
        return None
    found = [int(m.group(1)) for line in result.stdout.splitlines() if (m := _CPUS.match(line))]
    return min(found) if found else None

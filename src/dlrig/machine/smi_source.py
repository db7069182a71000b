"""GPUs read through the `nvidia-smi` program, where NVML cannot be used from Python but the
program works (a container or WSL where libnvidia-ml is not on Python's loader path, a broken
`nvidia-ml-py`).

Each sampling round runs `nvidia-smi --query-gpu=... --format=csv` once for all GPUs and
`--query-compute-apps` for their processes, and parses them with the same readers as a
recording (`dlrig.machine.readers.nvsmi_csv`). The fields asked for are those this driver's
`nvidia-smi --help-query-gpu` lists, so a field an older driver lacks cannot fail the query.
A round costs one or two process starts (tens of milliseconds), not microseconds as NVML does.
"""

from __future__ import annotations

import dataclasses
import socket

from dlrig.machine.gpu_source_base import SourceInfo
from dlrig.machine.model import Gpu, XidEvent
from dlrig.machine.nvml import GpuLost
from dlrig.machine.readers import nvsmi_csv, values
from dlrig.machine.recorder import COMPUTE_APPS, CORE_FIELDS, query_fields
from dlrig.machine.runner import CommandResult, Runner, SubprocessRunner

SMI = "nvidia-smi"


class SmiUnavailable(Exception):
    """nvidia-smi cannot be run or does not answer; the message says why."""


def _why(result: CommandResult) -> str:
    if result.error:
        return f"{SMI}: {result.error}"
    lines = (result.stderr or result.stdout).strip().splitlines()
    return f"{SMI}: " + (lines[0] if lines else f"exit code {result.returncode}")


class SmiSource:
    """Live GPUs through nvidia-smi. Raises SmiUnavailable when it cannot read them."""

    def __init__(self, runner: Runner | None = None, timeout_s: float = 10.0) -> None:
        self._runner = runner or SubprocessRunner()
        self._timeout_s = timeout_s
        listed = self._runner.run((SMI, "--help-query-gpu"), timeout_s)
        fields = query_fields(listed.stdout) if listed.ok else []
        self._query = (SMI, f"--query-gpu={','.join(fields) or CORE_FIELDS}", "--format=csv")
        self._apps = (SMI, f"--query-compute-apps={COMPUTE_APPS}", "--format=csv")
        self._gpus = self._read()
        if not self._gpus:
            raise SmiUnavailable(f"{SMI} lists no GPUs")
        self._error: str | None = None
        self.info = SourceInfo(
            kind="nvidia-smi",
            description=f"nvidia-smi, {len(self._gpus)} GPU(s)",
            hostname=socket.gethostname(),
            gpu_count=len(self._gpus),
            driver_version=self._driver,
        )

    def _read(self) -> tuple[Gpu, ...]:
        result = self._runner.run(self._query, self._timeout_s)
        if not result.ok:
            raise SmiUnavailable(_why(result))
        table = nvsmi_csv.rows(result.stdout)
        self._driver = values.text(table[0].get("driver_version")) if table else None
        gpus = [nvsmi_csv.gpu_from_row(i, row) for i, row in enumerate(table)]
        apps = self._runner.run(self._apps, self._timeout_s)
        if apps.ok:
            by_gpu = nvsmi_csv.processes_by_gpu(apps.stdout)
            gpus = [
                dataclasses.replace(
                    g, processes=by_gpu.get(g.uuid or "") or by_gpu.get(g.pci_bus_id or "") or ()
                )
                for g in gpus
            ]
        # Positions, not nvidia-smi's own indices: the sampler numbers GPUs 0..n-1.
        return tuple(dataclasses.replace(g, index=i) for i, g in enumerate(gpus))

    def advance(self, now: float) -> None:
        """One nvidia-smi run per round, for every GPU at once."""
        try:
            self._gpus = self._read()
            self._error = None
        except SmiUnavailable as exc:
            self._error = str(exc)

    def read_gpu(self, index: int) -> Gpu:
        if self._error is not None:
            raise RuntimeError(self._error)
        if index >= len(self._gpus):
            raise GpuLost(f"GPU {index} is no longer listed by {SMI}")
        return self._gpus[index]

    def drain_xid(self) -> list[XidEvent]:
        return []  # nvidia-smi has no event stream; the kernel log has them (doctor reads it)

    def close(self, calls_in_flight: bool = False) -> None:
        return None

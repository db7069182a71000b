"""The check registry: every doctor check is a pure function of a snapshot and options."""

from __future__ import annotations

import datetime as dt
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

from dlrig.machine.model import Machine
from dlrig.report import CheckResult, Status

AREAS = (
    "driver",
    "gpu",
    "rocm",
    "frameworks",
    "cuda",
    "nccl",
    "host",
    "storage",
    "network",
    "containers",
)


@dataclass(frozen=True)
class DoctorOptions:
    """Thresholds the checks use; the CLI exposes the ones people tune."""

    ram_to_gpu_memory_ratio: float = 1.5
    min_cpu_cores_per_gpu: int = 4
    min_shm_bytes: int = 1024**3  # DeepSpeed warns below 512 MB; 1 GiB leaves room for workers
    min_free_disk_bytes: int = 20 * 1000**3
    min_free_disk_fraction: float = 0.05
    min_open_files: int = 8192
    busy_utilization_percent: float = 10.0
    today: dt.date = field(default_factory=dt.date.today)
    data_paths: tuple[str, ...] = ()


CheckFunction = Callable[[Machine, DoctorOptions], CheckResult]


@dataclass(frozen=True)
class Check:
    id: str
    area: str
    title: str  # what the check looks at, for --explain and listings
    cause: str | None
    explanation: str
    function: CheckFunction
    function_module: str = ""  # the module that defines the check (doctor.checks lists them)

    def run(self, machine: Machine, options: DoctorOptions) -> CheckResult:
        return self.function(machine, options)

    # Builders for results, so every result carries the check's id, area and cause.
    def ok(self, title: str, *evidence: str) -> CheckResult:
        return self.result(Status.OK, title, evidence)

    def info(self, title: str, *evidence: str, fix: str | None = None) -> CheckResult:
        return self.result(Status.INFO, title, evidence, fix)

    def skip(self, title: str, *evidence: str) -> CheckResult:
        return self.result(Status.SKIP, title, evidence)

    def result(
        self,
        status: Status,
        title: str,
        evidence: tuple[str, ...] = (),
        fix: str | None = None,
        cause: str | None = None,
    ) -> CheckResult:
        return CheckResult(
            id=self.id,
            source="doctor",
            area=self.area,
            status=status,
            title=title,
            evidence=tuple(evidence),
            fix=fix,
            cause=cause,
        )

    def warn(self, title: str, *evidence: str, fix: str, cause: str | None = "") -> CheckResult:
        return self._problem(Status.WARN, title, evidence, fix, cause)

    def fail(self, title: str, *evidence: str, fix: str, cause: str | None = "") -> CheckResult:
        return self._problem(Status.FAIL, title, evidence, fix, cause)

    def _problem(
        self, status: Status, title: str, evidence: tuple[str, ...], fix: str, cause: str | None
    ) -> CheckResult:
        # cause "" (the default) is the check's own; None says the problem has no known cause.
        cause = self.cause if cause == "" else cause
        return self.result(status, title, evidence, fix, cause)


_REGISTRY: dict[str, Check] = {}


def check(
    id: str, title: str, cause: str | None = None
) -> Callable[[Callable[[Check, Machine, DoctorOptions], CheckResult]], Check]:
    """Register a check; its area is the start of its id ("gpu.ecc_errors": gpu). The
    function's docstring is its `--explain` text."""
    area = id.partition(".")[0]
    if area not in AREAS:
        raise ValueError(f"check {id!r}: unknown area {area!r}")

    def register(function: Callable[[Check, Machine, DoctorOptions], CheckResult]) -> Check:
        if id in _REGISTRY:
            raise ValueError(f"check {id!r} registered twice")
        holder: list[Check] = []

        def bound(machine: Machine, options: DoctorOptions) -> CheckResult:
            return function(holder[0], machine, options)

        entry = Check(
            id=id,
            area=area,
            title=title,
            cause=cause,
            explanation=inspect.cleandoc(function.__doc__ or title),
            function=bound,
            function_module=function.__module__,
        )
        holder.append(entry)
        _REGISTRY[id] = entry
        return entry

    return register

"""What the GPU checks share: registration that skips snapshots without GPUs, and a result
that lists the GPUs it is about, one line each, with the command that shows the same."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dlrig.doctor import facts
from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.machine.model import Gpu, Machine
from dlrig.report import CheckResult

GpuCheckFunction = Callable[[Check, tuple[Gpu, ...], Machine, DoctorOptions], CheckResult]


def gpu_check(
    id: str, title: str, cause: str | None = None, min_gpus: int = 1, nvidia_only: bool = False
) -> Callable[[GpuCheckFunction], Check]:
    """Register a check of the "gpu" area that runs only on snapshots with `min_gpus` GPUs and
    is handed them; its docstring is its `--explain` text, as for any check."""

    def register(function: GpuCheckFunction) -> Check:
        def run(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
            if not m.gpus:
                return c.skip("no GPUs in this snapshot" if min_gpus < 2 else "fewer than two GPUs")
            if len(m.gpus) < min_gpus:
                return c.skip("fewer than two GPUs")
            gpus = m.gpus
            if nvidia_only:
                gpus = tuple(g for g in m.gpus if g.is_nvidia)
                if not gpus:
                    return c.skip("no NVIDIA GPUs (an NVIDIA build check)")
            return function(c, gpus, m, o)

        run.__doc__ = function.__doc__
        run.__module__ = function.__module__  # the check belongs to the module that defines it
        return check(id, title, cause=cause)(run)

    return register


def per_gpu(
    result: Callable[..., CheckResult],
    title: str,
    gpus: Iterable[Gpu],
    line: Callable[[Gpu], str] = facts.gpu_label,
    check_command: str | None = None,
    fix: str | None = None,
    cause: str | None = "",
) -> CheckResult:
    """`result` (c.ok, c.info, c.warn, c.fail) with one evidence line a GPU and the command.
    `cause` "" keeps the check's own cause (warn and fail only), None says there is none."""
    evidence = [line(g) for g in gpus]
    if check_command:
        evidence.append(f"check: {check_command}")
    extra: dict[str, str | None] = {} if fix is None else {"fix": fix}
    if cause != "":
        extra["cause"] = cause
    return result(title, *evidence, **extra)

"""The acceptance run's calls into `doctor` and `bench`: the one module of `accept` that does.

Bench runs part by part (and compute and memory once per GPU), so a stop signal keeps every
part that finished, and the progress says which part runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dlrig import bench, doctor
from dlrig.accept.levels import Level
from dlrig.bench import BenchReport
from dlrig.errors import InputError, MissingExtraError
from dlrig.machine import probe, readers
from dlrig.machine.model import Machine, XidEvent
from dlrig.report import Progress

if TYPE_CHECKING:  # both command packages are imported when their stage runs
    from dlrig.bench import BenchReport
    from dlrig.doctor import DoctorReport

PER_GPU_PARTS = ("compute", "memory")


def machine_snapshot(replay: Sequence[str], machine_path: str | None) -> Machine:
    """The machine's facts: the recorded files in replay mode, a saved snapshot, or a probe."""
    if replay:
        return readers.load_many(list(replay))
    if machine_path:
        return readers.load(machine_path)
    return probe.collect()


def kernel_xids_after(before: Machine) -> list[XidEvent]:
    """Kernel-log Xid lines that appeared since `before` was probed (the kernel log read
    again, nothing else)."""
    seen = {
        (e.code, e.pci_bus_id, e.timestamp, e.message)
        for e in (before.kernel_log.xid_events if before.kernel_log else ())
    }
    after, _reason = probe.kernel_log()
    return [
        e
        for e in (after.xid_events if after else ())
        if (e.code, e.pci_bus_id, e.timestamp, e.message) not in seen
    ]


def check_gpu_indices(machine: Machine, indices: Sequence[int]) -> None:
    """--gpu-index names GPUs of this machine (NVML's numbering), checked before any work."""

    known = sorted(g.index for g in machine.gpus or ())
    for index in indices:
        if index not in known:
            have = f"GPUs {', '.join(map(str, known))}" if known else "no NVIDIA GPU"
            raise InputError(
                f"--gpu-index {index}: this machine has {have}",
                fix="give an index `nvidia-smi -L` lists, or drop --gpu-index",
            )


def doctor_report(machine: Machine) -> DoctorReport:
    return doctor.run(machine=machine)


def bench_parts(level: Level, skip: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The level's bench parts that this dlrig's bench has, less `skip` ("bench": all), and
    why each other part does not run."""
    for name in skip:
        if name != "bench" and name not in bench.PARTS:
            raise InputError(
                f"--skip {name!r} is not a bench part",
                fix=f"give one of: bench (all), {', '.join(bench.PARTS)}",
            )
    chosen, skipped = [], {}
    for part in bench.PARTS:
        if part not in level.bench_parts:
            skipped[part] = f"not at level {level.name}"
        elif part in skip or "bench" in skip:
            skipped[part] = "skipped (--skip)"
        else:
            chosen.append(part)
    return chosen, skipped


def run_bench(
    level: Level,
    parts: Sequence[str],
    machine: Machine,
    gpu_indices: Sequence[int],
    storage_dir: Path,
    progress: Progress,
    collected: BenchReport,
    skipped: dict[str, str],
) -> None:
    """Run `parts` into `collected` (filled in as each part finishes, a part run on each GPU
    saying which); a part that needs a missing extra (torch) goes into `skipped` with the
    install line."""
    # torch numbers GPUs fastest-first unless told otherwise, NVML by PCI bus: make torch's
    # cuda:N the GPU the monitor and doctor call N.
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    indices = list(gpu_indices) or [g.index for g in machine.gpus or ()] or [0]
    steps: list[tuple[str, int]] = []
    for part in parts:
        if part in PER_GPU_PARTS:
            steps.extend((part, i) for i in indices)
        else:
            steps.append((part, indices[0]))
    for position, (part, index) in enumerate(steps):
        options = bench.BenchOptions(
            parts=(part,),
            gpu_index=index,
            path=str(storage_dir) if part in ("storage", "pack") else None,
            size_bytes=level.storage_bytes,
            random_seconds=level.storage_random_seconds,
            quick=level.bench_quick,
        )

        def step(label: str, fraction: float, position: int = position) -> None:
            progress(f"bench {label}", (position + min(max(fraction, 0.0), 1.0)) / len(steps))

        if part in skipped:
            continue  # its extra is missing: said once
        try:
            report = bench.run(options, machine=machine, progress=step)
        except MissingExtraError as exc:
            skipped[part] = exc.one_line()
            continue
        if collected.device is None:
            collected.device = report.device
        on_gpu = report.device is not None and report.device.kind == "cuda"
        for result in report.results:
            collected.results.append(
                result.on_gpu(index) if part in PER_GPU_PARTS and on_gpu else result
            )


def empty_bench_report() -> BenchReport:
    """The bench report accept fills in part by part (no machine: accept's document has it)."""
    return BenchReport(machine=None, device=None)

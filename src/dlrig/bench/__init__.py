"""`dlrig bench`: measure each part of the server against what it should do, and say what to change.

Python API, one function per part plus the suite:

    from dlrig import bench
    device = bench.pick_device()
    bench.compute.run(device)                          # matmul TFLOP/s per dtype vs peak
    bench.memory.run(device)                           # device copy, host<->device vs PCIe
    bench.comms.run(device, processes=2)               # collectives: time, algbw, busbw
    bench.storage.run("/data/imagenet")                # seq/random reads, MB/s, IOPS (+ fio)
    results, search = bench.dataloader.run("mypkg.data:make_dataset")
    report = bench.run(bench.BenchOptions(parts=("compute", "memory")))  # the suite
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from dlrig.bench import comms, compute, dataloader, memory, pack, storage
from dlrig.bench.device import BenchDevice, same_pci_address, torch_module
from dlrig.bench.device import pick as pick_device
from dlrig.bench.results import BenchResult, Progress, no_progress
from dlrig.errors import InputError
from dlrig.machine.model import Gpu, Machine

__all__ = [
    "PARTS",
    "BenchOptions",
    "BenchReport",
    "BenchResult",
    "comms",
    "compute",
    "dataloader",
    "memory",
    "pick_device",
    "run",
    "storage",
]

# `--quick`: all parts within a minute on any machine, start-up included. The two parts whose
# length depends on the machine (a dtype it emulates, a slow decoder) measure inside a share,
# warm-ups included; the others are short by construction (one copy, three message sizes, a
# 256 MiB test file and 2 s of random reads).
QUICK_SECONDS = {"compute": 15.0, "dataloader": 15.0}
QUICK_STORAGE_BYTES = 256 << 20
QUICK_RANDOM_SECONDS = 2.0

SCHEMA_NAME = "dlrig.bench"
SCHEMA_VERSION = 1
PARTS = ("compute", "memory", "comms", "storage", "dataloader", "pack")
DeviceChoice = Literal["auto", "cuda", "cpu"]  # auto: a GPU when torch sees one


@dataclass(frozen=True)
class BenchOptions:
    parts: tuple[str, ...] = ()  # of PARTS; () = every part
    device: DeviceChoice = "auto"
    gpu_index: int = 0
    path: str | None = None  # storage: a dataset directory (test file) or a file to read
    size_bytes: int = 1 << 30  # storage test file
    random_seconds: float = 5.0
    with_fio: bool = True
    dataset: str | None = None  # dataloader: module:factory; None = synthetic images
    batch_size: int = 64
    processes: int | None = None  # comms: local ranks (default: GPUs, or 2 on the CPU)
    quick: bool = False  # each part within its share of a minute (QUICK_SECONDS)


@dataclass
class BenchReport:
    machine: Machine | None
    device: BenchDevice | None
    results: list[BenchResult] = field(default_factory=list)
    searches: dict[str, Any] = field(default_factory=dict)  # dataloader search, for plots

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA_NAME,
            "schema_version": SCHEMA_VERSION,
            "machine": self.machine.to_dict() if self.machine is not None else None,
            "device": None if self.device is None else self.device.to_dict(),
            "results": [r.to_dict() for r in self.results],
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> BenchReport:
        """The typed report from a saved `dlrig bench --json` (or the bench of an accept
        document); ValueError names what does not fit."""
        if document.get("schema") != SCHEMA_NAME:
            raise ValueError(f"not a dlrig bench document (schema {document.get('schema')!r})")
        results = document.get("results")
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise ValueError("bench document: `results` is not a list of objects")
        machine, device = document.get("machine"), document.get("device")
        return cls(
            machine=Machine.from_dict(machine, strict=False) if isinstance(machine, dict) else None,
            device=BenchDevice.from_dict(device) if isinstance(device, dict) else None,
            results=[BenchResult.from_dict(result) for result in results],
        )


def _run_part(
    part: str,
    device: BenchDevice | None,
    options: BenchOptions,
    machine: Machine | None,
    report: BenchReport,
    step: Progress,
) -> list[BenchResult]:
    if part == "pack":  # a dlrig pack (--path) against its loose files
        return pack.run_part(options.path, options.quick, step)
    if part == "compute":
        assert device is not None
        return compute.run(
            device,
            seconds_per_size=0.2 if options.quick else 0.5,
            progress=step,
            budget_seconds=QUICK_SECONDS["compute"] if options.quick else None,
        )
    if part == "memory":
        assert device is not None
        return memory.run(device, _gpu_of(machine, device), progress=step)
    if part == "comms":
        assert device is not None
        sizes = None
        if options.quick:
            # Fewer sizes, but keep the large ones: bus bandwidth is only judged on those.
            sizes = comms.GLOO_SIZES[-3:] if device.kind == "cpu" else comms.NCCL_SIZES[-2:]
        nvlink = device.spec.nvlink_gbs if device.spec and device.spec.has_nvlink else None
        return comms.run(
            device,
            options.processes,
            sizes,
            iterations=5 if options.quick else 10,
            nvlink_gbs=nvlink,
            progress=step,
        )
    if part == "storage":
        if options.path is None:
            return [
                BenchResult.of(
                    "storage",
                    "seq_read",
                    None,
                    "MB/s",
                    verdict="skip",
                    note="give --path DATASET_DIR to measure the storage the data is on",
                )
            ]
        quick = options.quick
        return storage.run(
            options.path,
            min(options.size_bytes, QUICK_STORAGE_BYTES) if quick else options.size_bytes,
            min(options.random_seconds, QUICK_RANDOM_SECONDS) if quick else options.random_seconds,
            with_fio=options.with_fio,
            progress=step,
        )
    cuda = device.torch_device if device is not None and device.kind == "cuda" else None
    results, search = dataloader.run(
        options.dataset,
        options.batch_size,
        cuda,
        trial_seconds=0.5 if options.quick else 1.5,
        batches_per_epoch=4 if options.quick else 10,
        progress=step,
        budget_seconds=QUICK_SECONDS["dataloader"] if options.quick else None,
    )
    report.searches["dataloader"] = search
    return results


def _gpu_of(machine: Machine | None, device: BenchDevice) -> Gpu | None:
    if machine is None or not machine.gpus or device.kind != "cuda":
        return None
    # torch's numbering follows CUDA_VISIBLE_DEVICES (HIP_VISIBLE_DEVICES) and
    # CUDA_DEVICE_ORDER, NVML's and rocm-smi's the bus: match on the UUID, else the PCI address.
    for gpu in machine.gpus:
        if device.uuid is not None and str(gpu.uuid).lower() == str(device.uuid).lower():
            return gpu
    for gpu in machine.gpus:
        if same_pci_address(gpu.pci_bus_id, device.pci_bus_id):
            return gpu
    return None


def run(
    options: BenchOptions | None = None,
    *,
    machine: Machine | None = None,
    progress: Progress = no_progress,
) -> BenchReport:
    """Run `options.parts` (all of them by default) and return every result, in part order.

    `machine`: this machine's snapshot (`dlrig.machine.probe.collect()`), which names the CPU
    and finds each GPU's PCIe link; None measures without it."""
    if options is not None and not isinstance(options, BenchOptions):
        # bench.run(parts, ...) of earlier releases
        raise TypeError(
            f"bench.run(options, *, machine=..., progress=...): options is a "
            f"{type(options).__name__}; give bench.BenchOptions(parts=(...))"
        )
    options = options or BenchOptions()
    parts = options.parts
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise InputError(f"no bench part named {unknown[0]!r}", fix=f"pick from {', '.join(PARTS)}")
    chosen = [p for p in PARTS if not parts or p in parts]
    needs_torch = any(p in chosen for p in ("compute", "memory", "comms", "dataloader"))
    device = pick_device(options.device, options.gpu_index) if needs_torch else None
    if (
        device is not None
        and device.kind == "cpu"
        and machine
        and machine.cpu
        and machine.cpu.model
    ):
        device = dataclasses.replace(device, name=machine.cpu.model)
    if options.path is None and "storage" in parts:
        raise InputError("bench storage needs --path", fix="give the dataset's directory")
    report = BenchReport(machine, device)
    for part in chosen:

        def step(label: str, fraction: float, part: str = part) -> None:
            progress(f"{part}: {label}" if not label.startswith(part) else label, fraction)

        if device is not None and device.kind == "cuda":
            torch_module().cuda.empty_cache()  # what one part cached must not starve the next
        try:
            report.results += _run_part(part, device, options, machine, report, step)
        except RuntimeError as exc:
            # Out of memory on a small or shared GPU, a CUDA error: this part fails, the
            # others still run.
            first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            report.results.append(
                BenchResult.of(
                    part, "run", None, "", verdict="fail", note=f"{type(exc).__name__}: {first}"
                )
            )
    return report

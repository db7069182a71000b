"""`dlrig plan upgrade`: what limits a server that exists, from its own measurements, and what
to change first, with the gain and the cost of each step.

Evidence: the machine snapshot (GPU model and count, PCIe links, NVLink topology), a `dlrig
bench --out` folder (storage, host<->device copies, collectives, matmul against peak) and a
monitor history (how busy the GPUs are, how full their memory gets, how busy the CPU is). A
workload, when given, adds what fit says it needs on this GPU and on others.

Steps come in the seeds' order: short term (settings, a re-seated card: no money), mid term (an
NVMe cache tier, bridges), long term (newer GPUs, a second server); within a term, the best
gain per dollar first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlrig.bench.results import BenchResult
from dlrig.errors import InputError
from dlrig.knowledge import plan as knowledge
from dlrig.knowledge.gpus import GpuSpec, catalogue
from dlrig.plan.assume import Input, Inputs
from dlrig.plan.evidence import TERMS, Limit, Step, bench_result
from dlrig.plan.rules import NEEDED_MB_S_PER_8_GPUS
from dlrig.plan.upgrade_hardware import compute_steps, interconnect_steps
from dlrig.plan.usage import Usage
from dlrig.report import envelope

if TYPE_CHECKING:
    from dlrig.machine.model import Machine
    from dlrig.plan.fitting import WorkloadFit

SCHEMA = "dlrig.plan.upgrade"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class UpgradeReport:
    machine: str
    gpu: GpuSpec
    count: int
    limits: tuple[Limit, ...]
    steps: tuple[Step, ...]
    inputs: tuple[Input, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return envelope(
            SCHEMA,
            SCHEMA_VERSION,
            {
                "machine": self.machine,
                "gpu": self.gpu.id,
                "gpus": self.count,
                "limits": [
                    {"area": lim.area, "limited": lim.limited, "evidence": list(lim.evidence)}
                    for lim in self.limits
                ],
                "steps": [s.to_dict() for s in self.steps],
                "inputs": [i.to_dict() for i in self.inputs],
            },
        )


def _machine_gpus(machine: Any) -> tuple[GpuSpec, int, list[Any]]:
    gpus = list(machine.gpus or ())
    if not gpus:
        raise InputError(
            "the machine snapshot lists no GPU",
            fix="save one with `dlrig doctor --save box.json` on the server",
        )
    spec = catalogue().resolve(gpus[0].catalogue_id or gpus[0].name) or catalogue().resolve(
        gpus[0].name
    )
    if spec is None:
        raise InputError(
            f"the machine's GPU {gpus[0].name!r} is not in the GPU catalogue",
            fix="plan upgrade needs a catalogue GPU",
        )
    return spec, len(gpus), gpus


def upgrade(
    machine: Machine,
    inputs: Inputs,
    bench: Sequence[BenchResult] | None = None,
    usage: Usage | None = None,
    workload_fit: WorkloadFit | None = None,
    dataset_gb: float | None = None,
    name: str = "",
) -> UpgradeReport:
    """What limits the existing server of `machine` (its snapshot), from its bench results,
    its monitor history and a fit of its workload, and the steps that lift each limit, with
    gain and cost (`dlrig plan upgrade`)."""
    spec, count, gpus = _machine_gpus(machine)
    if usage is not None:
        other = {g.catalogue_id or g.name for g in usage.gpus} - {spec.id}
        if other:
            raise InputError(
                f"the history is of {', '.join(sorted(map(str, other)))}, the snapshot of {spec.id}: not the same server",
                fix="give the history recorded on the server the snapshot describes",
            )
    limits: list[Limit] = []
    steps: list[Step] = []
    _input_pipeline(bench or [], usage, count, inputs, dataset_gb, limits, steps)
    _memory(usage, spec, limits, steps)
    compute_steps(usage, spec, count, inputs, workload_fit, limits, steps)
    interconnect_steps(gpus, machine, bench or [], spec, count, inputs, limits, steps)
    order = {t: i for i, t in enumerate(TERMS)}
    steps.sort(key=lambda s: (order[s.term], -(s.gain_factor or 1.0) / max(s.cost_usd, 1.0)))
    return UpgradeReport(name, spec, count, tuple(limits), tuple(steps), tuple(inputs.used()))


def _input_pipeline(
    bench: Sequence[BenchResult],
    usage: Usage | None,
    count: int,
    inputs: Inputs,
    dataset_gb: float | None,
    limits: list[Limit],
    steps: list[Step],
) -> None:
    evidence: list[str] = []
    limited: bool | None = None
    read = bench_result(bench, "storage", "seq_read")
    needed = NEEDED_MB_S_PER_8_GPUS * max(1, count) / 8
    if read and read.value is not None:
        value = float(read.value)
        slow = value < needed
        limited = slow
        evidence.append(
            f"bench storage seq_read {value:,.0f} MB/s; {count} GPU(s) of image training need ~{needed:,.0f} MB/s (bench's threshold)"
        )
        if slow:
            nvme = knowledge.component("nvme-gen4")
            size = dataset_gb or inputs.number("nvme_scratch_gb")
            gain = min((nvme.read_mb_s or value) / value, needed / value)
            steps.append(
                Step(
                    "mid",
                    f"an NVMe cache tier ({size:,.0f} GB) for the training data, staged before each run",
                    f"reads from {value:,.0f} to ~{nvme.read_mb_s:,.0f} MB/s: input up to {gain:.1f}x faster",
                    gain,
                    size * nvme.price_usd,
                    "input pipeline",
                    nvme.source,
                )
            )
    loader = bench_result(bench, "dataloader", "best_settings")
    if loader and loader.fix:
        speedup = loader.detail.get("speedup")
        evidence.append(f"bench dataloader found better settings: {loader.fix}")
        steps.append(
            Step(
                "short",
                f"DataLoader settings from `dlrig bench dataloader`: {loader.fix}",
                f"{speedup:.1f}x the default loader"
                if isinstance(speedup, int | float)
                else "faster input (measured by bench)",
                float(speedup) if isinstance(speedup, int | float) else None,
                0.0,
                "input pipeline",
                "dlrig bench dataloader",
            )
        )
    if (
        usage is not None
        and usage.host_cpu_mean_percent is not None
        and usage.utilization_mean_percent is not None
    ):
        starved = usage.utilization_mean_percent < 50 and usage.host_cpu_mean_percent > 80
        evidence.append(
            f"history: GPUs {usage.utilization_mean_percent:.0f}% busy while the CPU is {usage.host_cpu_mean_percent:.0f}% busy"
        )
        limited = limited or starved
    limits.append(
        Limit(
            "input pipeline",
            limited,
            tuple(evidence) or ("no storage bench or host history: not measured",),
        )
    )


def _memory(usage: Usage | None, spec: GpuSpec, limits: list[Limit], steps: list[Step]) -> None:
    if usage is None:
        limits.append(Limit("GPU memory", None, ("no history: memory use not measured",)))
        return
    shares = [
        g.memory_used_max_bytes / g.memory_total_bytes
        for g in usage.gpus
        if g.memory_used_max_bytes and g.memory_total_bytes
    ]
    if not shares:
        limits.append(Limit("GPU memory", None, ("the history has no memory readings",)))
        return
    top = max(shares)
    full = top > 0.9
    limits.append(
        Limit(
            "GPU memory",
            full,
            (f"history: GPU memory peaked at {top:.0%} of {spec.memory_gb:g} GB",),
        )
    )
    if full:
        steps.append(
            Step(
                "short",
                "activation checkpointing, FSDP or an 8-bit optimizer (dlrig fit --advise shows which fits)",
                "room for a larger batch or model at ~20-33% more compute (checkpointing)",
                None,
                0.0,
                "GPU memory",
            )
        )
        bigger = []
        for price in knowledge.gpu_prices():
            other = catalogue().get(price.gpu)
            if (
                price.condition == "new"
                and other is not None
                and (other.memory_gb or 0) > (spec.memory_gb or 0)
            ):
                bigger.append((price, other))
        bigger.sort(key=lambda pair: pair[0].price_usd)
        for price, other in bigger[:2]:
            steps.append(
                Step(
                    "long",
                    f"GPUs with more memory: {other.name} ({other.memory_gb:g} GB)",
                    f"{(other.memory_gb or 0) / (spec.memory_gb or 1):.1f}x the memory per GPU",
                    None,
                    price.price_usd,
                    "GPU memory",
                    price.source,
                )
            )

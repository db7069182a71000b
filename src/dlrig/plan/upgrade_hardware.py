"""`plan upgrade` steps that change hardware: newer GPUs, a second server, links and bridges."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dlrig.bench.results import BenchResult
from dlrig.knowledge import plan as knowledge
from dlrig.knowledge.gpus import GpuSpec, catalogue
from dlrig.plan.assume import Inputs
from dlrig.plan.evidence import Limit, Step, bench_result
from dlrig.plan.usage import Usage


def compute_steps(
    usage: Usage | None,
    spec: GpuSpec,
    count: int,
    inputs: Inputs,
    workload_fit: Any,
    limits: list[Limit],
    steps: list[Step],
) -> None:
    evidence: list[str] = []
    limited: bool | None = None
    if usage is not None and usage.utilization_mean_percent is not None:
        limited = usage.utilization_mean_percent > 85
        evidence.append(
            f"history: GPUs {usage.utilization_mean_percent:.0f}% busy on average, busy {usage.busy_fraction:.0%} of the time"
        )
    limits.append(
        Limit("compute", limited, tuple(evidence) or ("no history: GPU use not measured",))
    )
    # Newer GPUs: the time ratio from fit when a workload is given, else the dense-peak ratio.
    current = _speed(spec, count, workload_fit)
    if current is None:
        return
    candidates = []
    for price in knowledge.gpu_prices():
        other = catalogue().get(price.gpu)
        if other is None or price.condition != "new" or other.id == spec.id:
            continue
        speed = _speed(other, count, workload_fit)
        if speed is None or speed <= current * 1.2:
            continue
        candidates.append((speed / current, price, other))
    candidates.sort(key=lambda c: -c[0] / (c[1].price_usd * count))
    basis = (
        "fit's time per run for the workload"
        if workload_fit is not None
        else "dense BF16/FP16 peak (catalogue)"
    )
    for gain, price, other in candidates[:3]:
        steps.append(
            Step(
                "long",
                f"{count} x {other.name} in place of the {spec.name}s",
                f"{gain:.1f}x throughput ({basis})",
                gain,
                price.price_usd * count,
                "compute",
                price.source,
            )
        )
    if count <= 8 and workload_fit is not None:
        two = workload_fit.evaluate(spec, count * 2)
        one = workload_fit.evaluate(spec, count)
        if two.time_per_run_s and one.time_per_run_s:
            gain = one.time_per_run_s / two.time_per_run_s
            own = knowledge.gpu_price(spec.id, "new")
            cost = (own.price_usd * count if own else 0.0) + inputs.number("server_4u_platform_usd")
            steps.append(
                Step(
                    "long",
                    f"a second server like this one ({count * 2} GPUs over the network)",
                    f"{gain:.2f}x throughput (fit, at the default network bandwidth)",
                    gain,
                    cost,
                    "compute",
                    "fit.evaluate with gpus x 2; platform cost: server_4u_platform_usd",
                )
            )


def _speed(spec: GpuSpec, count: int, workload_fit: Any) -> float | None:
    if workload_fit is not None:
        result = workload_fit.evaluate(spec, count)
        return 1.0 / result.time_per_run_s if result.fits and result.time_per_run_s else None
    peak = spec.bf16_tflops or spec.fp16_tflops
    return peak * count if peak else None


def interconnect_steps(
    gpus: list[Any],
    machine: Any,
    bench: Sequence[BenchResult],
    spec: GpuSpec,
    count: int,
    inputs: Inputs,
    limits: list[Limit],
    steps: list[Step],
) -> None:
    evidence: list[str] = []
    limited: bool | None = None
    for gpu in gpus:
        link = gpu.pcie
        if link.width_current and link.width_max and link.width_current < link.width_max:
            limited = True
            evidence.append(
                f"GPU {gpu.index}: PCIe x{link.width_current} of x{link.width_max} (snapshot)"
            )
            steps.append(
                Step(
                    "short",
                    f"re-seat GPU {gpu.index} or move it to a full x{link.width_max} slot (check BIOS bifurcation)",
                    f"host<->device bandwidth up to {link.width_max / link.width_current:.0f}x",
                    link.width_max / link.width_current,
                    0.0,
                    "interconnect",
                    "machine snapshot PCIe link width",
                )
            )
    copy = bench_result(bench, "memory", "h2d_pinned")
    if copy and copy.verdict == "low":
        limited = True
        evidence.append(
            f"bench h2d_pinned {copy.value} {copy.unit} against {copy.expected} expected"
        )
    comms = bench_result(bench, "comms", "all_reduce")
    if comms and comms.verdict == "low":
        limited = True
        evidence.append(f"bench all_reduce bus bandwidth {comms.value} {comms.unit}, low")
    board = knowledge.gpu_boards().get(spec.id)
    topology = getattr(machine, "topology", None)
    nvlinked = bool(
        topology and any(cell.startswith("NV") for row in topology.matrix for cell in row)
    )
    if count > 1 and not nvlinked and board is not None and board.nvlink_bridge_gpus == 2:
        bridge = inputs.get("nvlink_bridge_usd")
        steps.append(
            Step(
                "mid",
                f"NVLink bridges for the {count} {spec.name}s (pairs)",
                f"pair bandwidth {spec.nvlink_gbs:g} GB/s against PCIe",
                None,
                inputs.number("nvlink_bridge_usd") * (count // 2),
                "interconnect",
                bridge.source,
            )
        )
    if count > 1 and not evidence:
        evidence.append("links at full width" + ("; NVLink present" if nvlinked else ""))
    limits.append(
        Limit(
            "interconnect",
            limited if evidence else None,
            tuple(evidence) or ("one GPU at full link width",),
        )
    )

"""`plan check`: a build against the rules of plan_rules.csv, each with its source.

A rule that fails carries the row's severity: "fail" rules make `plan check` exit 1, "warn" rules
are advice. A rule whose inputs the build does not give is skipped and says what it needed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dlrig.knowledge import plan as knowledge
from dlrig.plan.assume import Inputs
from dlrig.plan.buildspec import Build
from dlrig.plan.rules_power import (
    circuit,
    psu_capacity,
    psu_connectors,
    psu_redundancy,
    psu_transient,
)
from dlrig.plan.verdict import RuleResult, result, skipped, verdict
from dlrig.report import Status

NEEDED_MB_S_PER_8_GPUS = 1000.0  # bench's threshold; tests hold it equal to bench's constant


def lanes(build: Build, inputs: Inputs) -> RuleResult:
    if build.pcie_switches:
        return skipped(
            "pcie.lanes", "the board has PCIe switches: GPUs do not take CPU lanes one for one"
        )
    if build.gpus.spec.form_factor in ("sxm", "oam"):
        return skipped("pcie.lanes", "SXM/OAM modules hang off their baseboard's switches")
    if build.cpu is None or build.cpu.pcie_lanes is None:
        return skipped("pcie.lanes", "CPU lanes not given (cpu.model or cpu.pcie_lanes)")
    board = build.gpus.board
    per_gpu = 8 if board is not None and board.consumer else 16
    nvme = sum(1 for s in build.storage if s.kind.startswith("nvme"))
    needed = per_gpu * build.gpus.count + 4 * nvme
    have = build.cpu.pcie_lanes * build.cpu.sockets
    broken = needed > have
    title = (
        f"{needed} lanes needed ({build.gpus.count} GPUs x{per_gpu}"
        + (f" + {nvme} NVMe x4" if nvme else "")
        + f"), CPU has {have}"
    )
    return verdict("pcie.lanes", broken, title, [title])


def slots(build: Build, inputs: Inputs) -> RuleResult:
    width = build.gpus.slot_width
    if width is None or width == 0:
        return skipped("pcie.slots", "modules on a baseboard, or no board data")
    capacity = build.expansion_slots or (
        20 if build.form_factor == "4u-server" else int(knowledge.rule("pcie.slots").threshold)
    )
    used = width * build.gpus.count
    broken = used > capacity
    title = f"{build.gpus.count} cards x {width} slots = {used} slots, the chassis has {capacity}"
    return verdict("pcie.slots", broken, title, [title])


def ram(build: Build, inputs: Inputs) -> RuleResult:
    if build.ram_gb is None:
        return skipped("ram.vs_vram", "RAM not given (ram_gb)")
    ratio = knowledge.rule("ram.vs_vram").threshold
    total = build.vram_gb
    largest = build.gpus.spec.memory_gb or 0.0
    evidence = [
        f"{build.ram_gb:.0f} GB RAM = {build.ram_gb / total:.2f}x the {total:.0f} GB of GPU memory"
        if total
        else f"{build.ram_gb:.0f} GB RAM",
        f"Puget: >= {ratio:g}x total ({ratio * total:.0f} GB); Dettmers: >= the largest GPU ({largest:.0f} GB); seeds: 1.5x ({1.5 * total:.0f} GB)",
    ]
    if build.ram_gb < largest:
        return result(
            "ram.vs_vram",
            Status.FAIL,
            f"{build.ram_gb:.0f} GB RAM is below one GPU's {largest:.0f} GB",
            tuple(evidence),
            f"at least {largest:.0f} GB (Dettmers), {ratio * total:.0f} GB (Puget)",
        )
    broken = build.ram_gb < ratio * total
    title = (
        f"{build.ram_gb:.0f} GB RAM {'<' if broken else '>='} {ratio:g}x {total:.0f} GB GPU memory"
    )
    return verdict("ram.vs_vram", broken, title, evidence, f"{round_up_ram(ratio * total)} GB")


def round_up_ram(gb: float) -> int:
    sizes = (16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
    return next((s for s in sizes if s >= gb), int(math.ceil(gb / 1024) * 1024))


def cores(build: Build, inputs: Inputs) -> RuleResult:
    if build.cpu is None or build.cpu.cores is None:
        return skipped("cpu.cores", "CPU cores not given (cpu.model or cpu.cores)")
    per_gpu = knowledge.rule("cpu.cores").threshold
    total = build.cpu.cores * build.cpu.sockets
    count = build.gpus.count
    minimum = max(per_gpu * count, 16 if count > 1 else 0)
    broken = total < minimum
    title = (
        f"{total} cores for {count} GPUs ({total / count:.1f} per GPU); Puget: >= {per_gpu:g} per GPU"
        + (", >= 16 in a multi-GPU box" if count > 1 else "")
    )
    return verdict("cpu.cores", broken, title, [title], f"a CPU with at least {minimum:.0f} cores")


def nvlink(build: Build, inputs: Inputs) -> RuleResult:
    if not build.nvlink:
        return skipped("nvlink.available", "NVLink not asked for (nvlink: true)")
    spec = build.gpus.spec
    board = build.gpus.board
    if not spec.nvlink_gbs:
        return verdict(
            "nvlink.available",
            True,
            f"{spec.name} has no NVLink",
            [f"catalogue nvlink_gbs = {spec.nvlink_gbs}"],
        )
    bridge = board.nvlink_bridge_gpus if board is not None else 0
    if spec.form_factor in ("sxm", "oam", "mezzanine") or bridge >= build.gpus.count:
        return verdict(
            "nvlink.available",
            False,
            f"NVLink across all {build.gpus.count} GPUs ({spec.nvlink_gbs:g} GB/s)",
            [],
        )
    pairs = build.gpus.count // 2
    return result(
        "nvlink.available",
        Status.WARN,
        f"bridges link pairs only: {pairs} pair(s) of {build.gpus.count} GPUs",
        (f"a {bridge}-way bridge per pair; traffic between pairs goes over PCIe",),
        "expect PCIe speed between pairs; all-to-all NVLink needs an SXM system",
    )


def consumer_ecc(build: Build, inputs: Inputs) -> RuleResult:
    board = build.gpus.board
    if board is None:
        return skipped("consumer.ecc", f"no board data for {build.gpus.spec.id}")
    return verdict(
        "consumer.ecc",
        not board.ecc,
        f"{build.gpus.spec.name}: {'no ECC on GPU memory' if not board.ecc else 'ECC memory'}",
        [],
    )


def consumer_cooling(build: Build, inputs: Inputs) -> RuleResult:
    cooler = build.gpus.cooler_kind
    if cooler is None:
        return skipped("consumer.cooling", "cooler unknown")
    if cooler == "sxm":
        return skipped("consumer.cooling", "SXM modules are cooled by their baseboard")
    if build.liquid_cooling:
        return verdict("consumer.cooling", False, "liquid-cooled GPUs", [])
    limit = knowledge.rule("consumer.cooling").threshold
    broken = cooler == "open-air" and build.gpus.count >= limit
    return verdict("consumer.cooling", broken, f"{build.gpus.count} x {cooler} cooler", [])


def consumer_server(build: Build, inputs: Inputs) -> RuleResult:
    if build.form_factor != "4u-server":
        return skipped("consumer.server", "not a 4U server chassis")
    cooler = build.gpus.cooler_kind
    broken = cooler == "open-air"
    return verdict("consumer.server", broken, f"{cooler} cards in a 4U server", [])


def precision(build: Build, inputs: Inputs) -> RuleResult:
    if build.precision is None:
        return skipped("precision.support", "no training precision given (precision: amp-bf16 ...)")
    spec = build.gpus.spec
    needs = {
        "bf16": "bf16_tflops",
        "amp-bf16": "bf16_tflops",
        "amp-fp16": "fp16_tflops",
        "tf32": "tf32_tflops",
    }.get(build.precision)
    if needs is None:
        return verdict("precision.support", False, f"{build.precision} runs on any GPU", [])
    supported = getattr(spec, needs) is not None
    title = f"{build.precision} on {spec.name} ({spec.architecture}): {'supported' if supported else 'no hardware support'}"
    return verdict("precision.support", not supported, title, [])


def sxm(build: Build, inputs: Inputs) -> RuleResult:
    spec = build.gpus.spec
    if spec.form_factor not in ("sxm", "oam"):
        return skipped("sxm.baseboard", "PCIe cards")
    allowed = (
        (4, 8, 16)
        if spec.id.startswith("v100-sxm3")
        else (4, 8)
        if spec.form_factor == "sxm"
        else (8,)
    )
    broken = build.gpus.count not in allowed
    return verdict(
        "sxm.baseboard",
        broken,
        f"{build.gpus.count} {spec.form_factor.upper()} modules (baseboards hold {'/'.join(map(str, allowed))})",
        [],
        f"{allowed[-1]} GPUs on one baseboard",
    )


def storage(build: Build, inputs: Inputs) -> RuleResult:
    reads = [s.read_mb_s for s in build.storage if s.read_mb_s]
    if not reads:
        return skipped(
            "storage.throughput", "no storage read speed given (storage: [{kind, read_mb_s}])"
        )
    needed = NEEDED_MB_S_PER_8_GPUS * max(1, build.gpus.count) / 8
    best = max(reads)
    broken = best < needed
    title = f"fastest storage reads {best:.0f} MB/s; {build.gpus.count} GPUs of image training need ~{needed:.0f} MB/s"
    return verdict("storage.throughput", broken, title, [title])


RULES: tuple[Callable[[Build, Inputs], RuleResult], ...] = (
    psu_capacity,
    psu_redundancy,
    psu_connectors,
    psu_transient,
    circuit,
    lanes,
    slots,
    ram,
    cores,
    nvlink,
    consumer_ecc,
    consumer_cooling,
    consumer_server,
    precision,
    sxm,
    storage,
)


def check(build: Build, inputs: Inputs | None = None) -> list[RuleResult]:
    inputs = inputs or Inputs()
    return [rule(build, inputs) for rule in RULES]

"""Power rules of `plan check`: PSU size, redundancy, connectors, transients, the circuit."""

from __future__ import annotations

import math

from dlrig.knowledge import plan as knowledge
from dlrig.plan import power
from dlrig.plan.assume import Inputs
from dlrig.plan.buildspec import Build
from dlrig.plan.verdict import RuleResult, skipped, verdict


def psu_capacity(build: Build, inputs: Inputs) -> RuleResult:
    if build.psu is None:
        return skipped("psu.capacity", "no PSU given (psu_watts or psu)")
    need = power.psu_need(build)
    have = build.psu.capacity_watts
    evidence = [f"needs {need.required_watts:.0f} W = {need.basis}", f"PSU delivers {have:.0f} W"]
    if build.psu.redundant:
        evidence[-1] += (
            f" ({build.psu.count - build.psu.redundant} of {build.psu.count} x {build.psu.watts:.0f} W, {build.psu.redundant} redundant)"
        )
    broken = have < need.required_watts
    title = f"PSU {have:.0f} W {'<' if broken else '>='} {need.required_watts:.0f} W needed"
    fix = f"a PSU of at least {math.ceil(need.required_watts / 100) * 100:.0f} W"
    if build.gpus.spec.tdp_watts and not build.gpus.power_limit_watts:
        fix += ", or power-limit the GPUs (nvidia-smi -pl): Puget kept >95% of throughput at 280 W of 350 W on RTX 3090s"
    return verdict("psu.capacity", broken, title, evidence, fix)


def psu_redundancy(build: Build, inputs: Inputs) -> RuleResult:
    if build.psu is None or not build.psu.redundant:
        return skipped("psu.redundancy", "no redundant PSUs declared")
    load = build.system_power_watts or power.peak_dc_watts(build, inputs)
    remaining = build.psu.capacity_watts
    broken = remaining < load
    title = f"{build.psu.count - build.psu.redundant} PSUs left after {build.psu.redundant} fail carry {remaining:.0f} W for a {load:.0f} W load"
    return verdict("psu.redundancy", broken, title, [title])


def psu_connectors(build: Build, inputs: Inputs) -> RuleResult:
    board = build.gpus.board
    if build.psu is None or build.psu.pcie_connectors is None:
        return skipped(
            "psu.connectors", "the PSU's PCIe connector count is not given (psu.pcie_connectors)"
        )
    if board is None:
        return skipped("psu.connectors", f"no board data for {build.gpus.spec.id}")
    needed = board.pcie_8pin_equivalents * build.gpus.count
    have = build.psu.pcie_connectors
    broken = have < needed
    title = (
        f"GPUs need {needed} PCIe 8-pin connectors ({board.power_connectors} each), PSU has {have}"
    )
    return verdict("psu.connectors", broken, title, [title])


def psu_transient(build: Build, inputs: Inputs) -> RuleResult:
    board = build.gpus.board
    if board is None or not board.consumer:
        return skipped("psu.transient", "not a consumer card (no published transient spikes)")
    if board.transient_peak_watts is None:
        return skipped("psu.transient", f"no transient measurement for {build.gpus.spec.id}")
    if build.psu is None:
        return skipped("psu.transient", "no PSU given")
    if build.psu.atx3:
        return verdict("psu.transient", False, "ATX 3.x PSU: rated for power excursions", [])
    scale = build.gpus.watts_each / (build.gpus.spec.tdp_watts or build.gpus.watts_each)
    spikes = board.transient_peak_watts * scale * build.gpus.count + power.cpu_watts(build)
    have = build.psu.capacity_watts
    broken = spikes > have * knowledge.rule("psu.transient").threshold
    title = f"millisecond spikes up to {spikes:.0f} W ({build.gpus.count} x {board.transient_peak_watts * scale:.0f} W + CPU) against a {have:.0f} W PSU"
    return verdict("psu.transient", broken, title, [title])


def circuit(build: Build, inputs: Inputs) -> RuleResult:
    if build.circuit is None:
        return skipped("power.circuit", "no circuit given (circuit: {volts, amps})")
    share = knowledge.rule("power.circuit").threshold
    limit = build.circuit.watts * share
    wall = power.peak_wall_watts(build, inputs)
    broken = wall > limit
    basis = (
        "vendor maximum input"
        if build.system_power_watts
        else "estimated at full load through the PSU's efficiency"
    )
    title = f"{wall:.0f} W at the wall ({basis}) {'>' if broken else '<='} {limit:.0f} W ({share:.0%} of {build.circuit.label()})"
    fix = "a second circuit, a 230 V circuit, or GPU power limits"
    return verdict("power.circuit", broken, title, [title], fix)

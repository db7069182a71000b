"""Power of a build: what the PSUs must deliver, and what the wall sees.

DC load is what the parts draw: the GPUs at their power limit (or TDP), the CPU, and the rest of
the platform. The wall sees the DC load divided by the PSU's efficiency at that load (80 PLUS
minimums, plan_psu_efficiency.csv), then the room multiplies it by its PUE.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlrig.knowledge import plan as knowledge
from dlrig.plan.assume import Inputs
from dlrig.plan.buildspec import Build

# Dettmers: "an additional 10% of watts for other components and as a buffer for power spikes
# ... I would usually add another 10% just to be sure" (plan_rules.csv psu.capacity).
DETTMERS_MARGIN = 1.1 * 1.1


@dataclass(frozen=True)
class PsuNeed:
    required_watts: float
    load_watts: float
    basis: str  # how the load was counted


def cpu_watts(build: Build) -> float:
    if build.cpu is None or build.cpu.tdp_watts is None:
        return 0.0
    return build.cpu.tdp_watts * build.cpu.sockets


def psu_need(build: Build) -> PsuNeed:
    """Dettmers' sizing: (GPUs + CPU) x 1.1 x 1.1; a vendor's maximum system power already counts
    the other parts, so it only gets the spike margin (x 1.1)."""
    threshold = knowledge.rule("psu.capacity").threshold
    if build.system_power_watts:
        return PsuNeed(
            build.system_power_watts * 1.1,
            build.system_power_watts,
            f"vendor maximum {build.system_power_watts:.0f} W x 1.1",
        )
    load = build.gpu_watts + cpu_watts(build)
    parts = f"{build.gpus.count} x {build.gpus.watts_each:.0f} W GPUs"
    if cpu_watts(build):
        parts += f" + {cpu_watts(build):.0f} W CPU"
    return PsuNeed(load * threshold, load, f"({parts}) x {threshold:g}")


def platform_watts(build: Build, inputs: Inputs) -> float:
    name = (
        "platform_watts_workstation"
        if build.form_factor == "workstation"
        else "platform_watts_server"
    )
    return inputs.number(name)


def psu_input(build: Build) -> str:
    if build.psu is not None and build.psu.input:
        return build.psu.input
    high_voltage = build.circuit is not None and build.circuit.volts >= 200
    if build.psu is not None and build.psu.redundant:
        return "230v_internal_redundant"
    return "230v_eu_internal" if high_voltage else "115v_internal"


def psu_level(build: Build, inputs: Inputs) -> str:
    level = build.psu.efficiency if build.psu is not None and build.psu.efficiency else None
    level = level or inputs.text("psu_efficiency_level")
    input_kind = psu_input(build)
    available = {p.level for p in knowledge.psu_curve() if p.input == input_kind}
    # 80 PLUS has no plain "80plus" level for redundant 230 V units: the nearest is Bronze.
    return level if level in available else "bronze"


def wall_watts(build: Build, dc_watts: float, inputs: Inputs) -> float:
    """AC power for a DC load: divided by the PSU efficiency at that share of its rating."""
    capacity = build.psu.capacity_watts if build.psu is not None else dc_watts / 0.6
    load = dc_watts / capacity if capacity else 1.0
    efficiency = knowledge.psu_efficiency(psu_level(build, inputs), psu_input(build), load)
    return dc_watts / efficiency


def peak_dc_watts(build: Build, inputs: Inputs) -> float:
    """Everything at its rating: GPUs at their limit, CPU at TDP, plus the platform."""
    return build.gpu_watts + cpu_watts(build) + platform_watts(build, inputs)


def peak_wall_watts(build: Build, inputs: Inputs) -> float:
    if build.system_power_watts:
        return build.system_power_watts  # vendors publish the input (wall) maximum
    return wall_watts(build, peak_dc_watts(build, inputs), inputs)


def training_wall_watts(build: Build, inputs: Inputs) -> float:
    """Sustained draw while training (the ASSUMPTION fractions say how close to the ratings)."""
    if build.system_power_watts:
        return build.system_power_watts * inputs.number("gpu_training_power_fraction")
    dc = (
        build.gpu_watts * inputs.number("gpu_training_power_fraction")
        + cpu_watts(build) * inputs.number("cpu_training_load")
        + platform_watts(build, inputs)
    )
    return wall_watts(build, dc, inputs)


def idle_wall_watts(build: Build, inputs: Inputs) -> float:
    tdp = (build.gpus.spec.tdp_watts or build.gpus.watts_each) * build.gpus.count
    dc = tdp * inputs.number("gpu_idle_power_fraction") + inputs.number("host_idle_watts")
    return wall_watts(build, dc, inputs)

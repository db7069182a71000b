"""The tables `dlrig plan` stands on: prices, boards, CPUs, PSU efficiency, cloud, rules, assumptions.

Every row carries its `source` and `as_of`; the loaders keep both so the plan can show where a
figure came from. Rows whose `sourced` column says "no" are ASSUMPTIONS: the plan labels them as
such and `--assume NAME=VALUE` overrides them.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from dlrig.knowledge.tables import KnowledgeError, entry, records

PRICINGS = ("on_demand", "spot", "reserved_1y", "reserved_3y")
CONDITIONS = ("new", "used")
RULE_SEVERITIES = ("fail", "warn")


@dataclass(frozen=True)
class Sourced:
    source: str
    as_of: str


@dataclass(frozen=True)
class GpuPrice(Sourced):
    gpu: str
    condition: str  # new | used
    price_usd: float


@dataclass(frozen=True)
class GpuBoard(Sourced):
    gpu: str
    slots: int  # expansion slots the reference board occupies (0 for SXM modules)
    cooler: str  # open-air | blower | passive | sxm
    power_connectors: str
    pcie_8pin_equivalents: int
    transient_peak_watts: float | None
    ecc: bool
    nvlink_bridge_gpus: int  # 0 none, 2 a 2-way bridge, 8/16 an NVSwitch baseboard
    consumer: bool


@dataclass(frozen=True)
class Cpu(Sourced):
    id: str
    name: str
    vendor: str
    platform: str  # desktop | hedt | workstation | server
    cores: int
    pcie_lanes: int
    pcie_gen: int
    memory_channels: int
    max_sockets: int
    tdp_watts: float
    price_usd: float | None


@dataclass(frozen=True)
class PsuPoint(Sourced):
    level: str
    input: str
    load_percent: float
    efficiency: float


@dataclass(frozen=True)
class CloudPrice(Sourced):
    provider: str
    instance: str
    gpu: str
    gpus: int
    pricing: str
    usd_per_hour: float
    region: str


@dataclass(frozen=True)
class Component(Sourced):
    item: str
    category: str
    capacity: float
    capacity_unit: str
    price_usd: float
    read_mb_s: float | None


@dataclass(frozen=True)
class Assumption(Sourced):
    name: str
    value: str
    unit: str
    allowed: str  # an interval such as "[0,1]" or "(0,inf)"; empty for a word
    sourced: bool
    description: str

    @property
    def number(self) -> float:
        return float(self.value)


@dataclass(frozen=True)
class Rule(Sourced):
    id: str
    area: str
    severity: str  # fail | warn
    threshold: float
    unit: str
    description: str
    fix: str  # what a breach is told to do; a rule with figures to name gives its own


@dataclass(frozen=True)
class WallPower(Sourced):
    build: str
    gpu: str
    gpus: int
    gpu_power_limit_watts: float | None
    cpu: str
    psu_watts: float | None
    measured_watts: float
    kind: str


@functools.cache
def gpu_prices() -> tuple[GpuPrice, ...]:
    return records("plan_gpu_prices", GpuPrice, {"condition": CONDITIONS})


def gpu_price(gpu: str, condition: str) -> GpuPrice | None:
    for price in gpu_prices():
        if price.gpu == gpu and price.condition == condition:
            return price
    return None


@functools.cache
def gpu_boards() -> dict[str, GpuBoard]:
    return {board.gpu: board for board in records("plan_gpu_boards", GpuBoard)}


@functools.cache
def cpus() -> dict[str, Cpu]:
    return {cpu.id: cpu for cpu in records("plan_cpus", Cpu)}


@functools.cache
def psu_curve() -> tuple[PsuPoint, ...]:
    return records("plan_psu_efficiency", PsuPoint)


def psu_efficiency(level: str, input_kind: str, load_fraction: float) -> float:
    """The 80 PLUS minimum efficiency at this load, interpolated between certified points;
    below the lightest point and above 100% the end points hold (certification says nothing
    there, and an overloaded PSU is a rule failure, not an efficiency)."""
    points = sorted(
        (p for p in psu_curve() if p.level == level and p.input == input_kind),
        key=lambda p: p.load_percent,
    )
    if not points:
        raise KnowledgeError(f"plan_psu_efficiency has no {level!r} row for {input_kind!r}")
    percent = max(0.0, load_fraction) * 100
    if percent <= points[0].load_percent:
        return points[0].efficiency
    for low, high in itertools.pairwise(points):
        if percent <= high.load_percent:
            share = (percent - low.load_percent) / (high.load_percent - low.load_percent)
            return low.efficiency + share * (high.efficiency - low.efficiency)
    return points[-1].efficiency


def psu_levels() -> tuple[str, ...]:
    return tuple(dict.fromkeys(p.level for p in psu_curve()))


@functools.cache
def cloud_prices() -> tuple[CloudPrice, ...]:
    return records("plan_cloud_prices", CloudPrice, {"pricing": PRICINGS})


@functools.cache
def components() -> dict[str, Component]:
    return {part.item: part for part in records("plan_components", Component)}


def component(item: str) -> Component:
    return entry(components(), item, "plan_components", "item")


@functools.cache
def assumptions() -> dict[str, Assumption]:
    return {entry.name: entry for entry in records("plan_assumptions", Assumption)}


@functools.cache
def rules() -> dict[str, Rule]:
    return {rule.id: rule for rule in records("plan_rules", Rule, {"severity": RULE_SEVERITIES})}


def rule(rule_id: str) -> Rule:
    return entry(rules(), rule_id, "plan_rules", "rule")


@functools.cache
def wall_power() -> tuple[WallPower, ...]:
    return records("plan_wall_power", WallPower)


PLAN_TABLES = (
    "plan_gpu_prices",
    "plan_gpu_boards",
    "plan_cpus",
    "plan_psu_efficiency",
    "plan_cloud_prices",
    "plan_components",
    "plan_assumptions",
    "plan_rules",
    "plan_wall_power",
)

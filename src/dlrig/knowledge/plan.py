"""The tables `dlrig plan` stands on: prices, boards, CPUs, PSU efficiency, cloud, rules, assumptions.

Every row carries its `source` and `as_of`; the loaders keep both so the plan can show where a
figure came from. Rows whose `sourced` column says "no" are ASSUMPTIONS: the plan labels them as
such and `--assume NAME=VALUE` overrides them.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from dlrig.knowledge.tables import KnowledgeError, optional_float, rows

PRICINGS = ("on_demand", "spot", "reserved_1y", "reserved_3y")
CONDITIONS = ("new", "used")


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


def _yes(value: str, table: str) -> bool:
    if value not in ("yes", "no"):
        raise KnowledgeError(f"knowledge table {table}: {value!r} is not yes or no")
    return value == "yes"


def _sourced(row: dict[str, str]) -> dict[str, str]:
    return {"source": row["source"], "as_of": row["as_of"]}


@functools.cache
def gpu_prices() -> tuple[GpuPrice, ...]:
    result = []
    for row in rows("plan_gpu_prices"):
        if row["condition"] not in CONDITIONS:
            raise KnowledgeError(f"plan_gpu_prices: condition {row['condition']!r}")
        result.append(
            GpuPrice(
                gpu=row["gpu"],
                condition=row["condition"],
                price_usd=float(row["price_usd"]),
                **_sourced(row),
            )
        )
    return tuple(result)


def gpu_price(gpu: str, condition: str) -> GpuPrice | None:
    for price in gpu_prices():
        if price.gpu == gpu and price.condition == condition:
            return price
    return None


@functools.cache
def gpu_boards() -> dict[str, GpuBoard]:
    return {
        row["gpu"]: GpuBoard(
            gpu=row["gpu"],
            slots=int(row["slots"]),
            cooler=row["cooler"],
            power_connectors=row["power_connectors"],
            pcie_8pin_equivalents=int(row["pcie_8pin_equivalents"]),
            transient_peak_watts=optional_float(row["transient_peak_watts"]),
            ecc=_yes(row["ecc"], "plan_gpu_boards"),
            nvlink_bridge_gpus=int(row["nvlink_bridge_gpus"]),
            consumer=_yes(row["consumer"], "plan_gpu_boards"),
            **_sourced(row),
        )
        for row in rows("plan_gpu_boards")
    }


@functools.cache
def cpus() -> dict[str, Cpu]:
    return {
        row["id"]: Cpu(
            id=row["id"],
            name=row["name"],
            vendor=row["vendor"],
            platform=row["platform"],
            cores=int(row["cores"]),
            pcie_lanes=int(row["pcie_lanes"]),
            pcie_gen=int(row["pcie_gen"]),
            memory_channels=int(row["memory_channels"]),
            max_sockets=int(row["max_sockets"]),
            tdp_watts=float(row["tdp_watts"]),
            price_usd=optional_float(row["price_usd"]),
            **_sourced(row),
        )
        for row in rows("plan_cpus")
    }


@functools.cache
def psu_curve() -> tuple[PsuPoint, ...]:
    return tuple(
        PsuPoint(
            level=row["level"],
            input=row["input"],
            load_percent=float(row["load_percent"]),
            efficiency=float(row["efficiency"]),
            **_sourced(row),
        )
        for row in rows("plan_psu_efficiency")
    )


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
    result = []
    for row in rows("plan_cloud_prices"):
        if row["pricing"] not in PRICINGS:
            raise KnowledgeError(f"plan_cloud_prices: pricing {row['pricing']!r}")
        result.append(
            CloudPrice(
                provider=row["provider"],
                instance=row["instance"],
                gpu=row["gpu"],
                gpus=int(row["gpus"]),
                pricing=row["pricing"],
                usd_per_hour=float(row["usd_per_hour"]),
                region=row["region"],
                **_sourced(row),
            )
        )
    return tuple(result)


@functools.cache
def components() -> dict[str, Component]:
    return {
        row["item"]: Component(
            item=row["item"],
            category=row["category"],
            capacity=float(row["capacity"]),
            capacity_unit=row["capacity_unit"],
            price_usd=float(row["price_usd"]),
            read_mb_s=optional_float(row["read_mb_s"]),
            **_sourced(row),
        )
        for row in rows("plan_components")
    }


def component(item: str) -> Component:
    try:
        return components()[item]
    except KeyError:
        raise KnowledgeError(f"plan_components has no item {item!r}") from None


@functools.cache
def assumptions() -> dict[str, Assumption]:
    return {
        row["name"]: Assumption(
            name=row["name"],
            value=row["value"],
            unit=row["unit"],
            sourced=_yes(row["sourced"], "plan_assumptions"),
            description=row["description"],
            **_sourced(row),
        )
        for row in rows("plan_assumptions")
    }


@functools.cache
def rules() -> dict[str, Rule]:
    result = {}
    for row in rows("plan_rules"):
        if row["severity"] not in ("fail", "warn"):
            raise KnowledgeError(f"plan_rules {row['id']}: severity {row['severity']!r}")
        result[row["id"]] = Rule(
            id=row["id"],
            area=row["area"],
            severity=row["severity"],
            threshold=float(row["threshold"]),
            unit=row["unit"],
            description=row["description"],
            **_sourced(row),
        )
    return result


def rule(rule_id: str) -> Rule:
    try:
        return rules()[rule_id]
    except KeyError:
        raise KnowledgeError(f"plan_rules has no rule {rule_id!r}") from None


@functools.cache
def wall_power() -> tuple[WallPower, ...]:
    return tuple(
        WallPower(
            build=row["build"],
            gpu=row["gpu"],
            gpus=int(row["gpus"]),
            gpu_power_limit_watts=optional_float(row["gpu_power_limit_watts"]),
            cpu=row["cpu"],
            psu_watts=optional_float(row["psu_watts"]),
            measured_watts=float(row["measured_watts"]),
            kind=row["kind"],
            **_sourced(row),
        )
        for row in rows("plan_wall_power")
    )


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

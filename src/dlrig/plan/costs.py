"""Money: capex, energy at the wall, TCO over the years of service, cost per run, break-even.

A build's cost per run charges the run its share of the capex (spread over the hours the
machine is busy in its years of service) plus the energy it draws at the wall times the PUE.
A cloud run costs its hours times the instance price (spot adds the preemption overhead); a
reservation is paid for every hour of its term, used or not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dlrig.plan import power
from dlrig.plan.assume import Inputs
from dlrig.plan.builds import Candidate
from dlrig.plan.cloud import CloudOffer
from dlrig.plan.workloads import Workload

HOURS_PER_YEAR = 8760.0


# Keyword-only: a rented option has no wall power or energy of its own, left at None.
@dataclass(frozen=True, kw_only=True)
class Economics:
    capex_usd: float
    busy_hours_per_year: float | None
    cost_per_year_usd: float | None  # what running it costs each year (cloud: the bills)
    tco_usd: float | None
    cost_per_run_usd: dict[str, float | None]
    power_wall_watts: float | None = None  # while training
    idle_wall_watts: float | None = None
    energy_kwh_per_year: float | None = None
    energy_cost_usd_per_year: float | None = None
    over_capacity: bool = False


def demand_hours(workloads: Sequence[Workload], times: Mapping[str, float | None]) -> float | None:
    """Hours a year the workloads keep one option busy (None when a time is unknown)."""
    total = 0.0
    for workload in workloads:
        seconds = times.get(workload.name)
        if seconds is None:
            return None
        total += seconds / 3600 * workload.runs_per_year
    return total


def build_economics(
    candidate: Candidate,
    workloads: Sequence[Workload],
    times: Mapping[str, float | None],
    inputs: Inputs,
    utilisation: float | None,
) -> Economics:
    build = candidate.build
    price = inputs.number("electricity_usd_per_kwh")
    pue = inputs.number("pue") * (
        inputs.number("liquid_pue_factor") if build.liquid_cooling else 1.0
    )
    years = inputs.number("years_of_service")
    train = power.training_wall_watts(build, inputs)
    idle = power.idle_wall_watts(build, inputs)
    demand = demand_hours(workloads, times)
    busy = demand
    if utilisation is not None:
        busy = (
            utilisation * HOURS_PER_YEAR
            if demand is None
            else max(demand, utilisation * HOURS_PER_YEAR)
        )
    over = demand is not None and demand > (utilisation or 1.0) * HOURS_PER_YEAR
    energy_kwh = None
    if busy is not None:
        busy_capped = min(busy, HOURS_PER_YEAR)
        energy_kwh = (busy_capped * train + (HOURS_PER_YEAR - busy_capped) * idle) / 1000 * pue
    energy_cost = energy_kwh * price if energy_kwh is not None else None
    capex = candidate.capex_usd
    tco = capex + years * energy_cost if energy_cost is not None else None
    per_run: dict[str, float | None] = {}
    for workload in workloads:
        seconds = times.get(workload.name)
        if seconds is None or not busy:
            per_run[workload.name] = None
            continue
        hours = seconds / 3600
        capex_per_hour = capex / (years * min(busy, HOURS_PER_YEAR))
        per_run[workload.name] = hours * (capex_per_hour + train / 1000 * pue * price)
    return Economics(
        capex_usd=capex,
        power_wall_watts=train,
        idle_wall_watts=idle,
        busy_hours_per_year=busy,
        energy_kwh_per_year=energy_kwh,
        energy_cost_usd_per_year=energy_cost,
        cost_per_year_usd=energy_cost,
        tco_usd=tco,
        cost_per_run_usd=per_run,
        over_capacity=over,
    )


def cloud_economics(
    offer: CloudOffer,
    workloads: Sequence[Workload],
    times: Mapping[str, float | None],
    inputs: Inputs,
) -> Economics:
    years = inputs.number("years_of_service")
    demand = demand_hours(workloads, times)
    overhead = inputs.number("spot_interruption_overhead") if offer.pricing == "spot" else 0.0
    per_run: dict[str, float | None] = {}
    if offer.pricing.startswith("reserved"):
        # A commitment bills every hour of its term; runs share it by the hours they use.
        yearly = offer.usd_per_hour * HOURS_PER_YEAR
        for workload in workloads:
            seconds = times.get(workload.name)
            per_run[workload.name] = (
                None if seconds is None or not demand else yearly * (seconds / 3600) / demand
            )
        over = demand is not None and demand > HOURS_PER_YEAR
    else:
        yearly = 0.0
        for workload in workloads:
            seconds = times.get(workload.name)
            cost = None if seconds is None else seconds / 3600 * (1 + overhead) * offer.usd_per_hour
            per_run[workload.name] = cost
            yearly = yearly + cost * workload.runs_per_year if cost is not None else yearly
        over = False
        if demand is None:
            yearly = float("nan")
    known = yearly == yearly  # not NaN
    return Economics(
        capex_usd=0.0,
        busy_hours_per_year=demand,
        cost_per_year_usd=yearly if known else None,
        tco_usd=yearly * years if known else None,
        cost_per_run_usd=per_run,
        over_capacity=over,
    )


def break_even_months(build: Economics, cloud: Economics) -> float | None:
    """Months of the workloads until buying has cost less than renting (None: never)."""
    if cloud.cost_per_year_usd is None or build.energy_cost_usd_per_year is None:
        return None
    saving = (cloud.cost_per_year_usd - build.energy_cost_usd_per_year) / 12
    if saving <= 0:
        return None
    return build.capex_usd / saving

"""`dlrig plan cost --history DB`: this server's real use, its energy bill, and what the seeds'
savings would be worth on this history, in money per year.

- night sleep over IPMI: the stretches when every GPU sat idle for at least
  sleep_min_idle_minutes, powered off (standby_watts) instead of idling;
- GPU sharing: packing the measured work onto fewer GPUs (at sharing_target_utilisation)
  frees the rest: their idle energy and their share of the purchase;
- bursty jobs to spot: when the server is busy less than bursty_duty_cycle of the time, its
  busy GPU-hours rented on spot against what owning costs a year.

Figures are extrapolated from the recorded hours to a month and a year, and say so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dlrig.knowledge import plan as knowledge
from dlrig.plan.assume import Input, Inputs
from dlrig.plan.cloud import offers
from dlrig.plan.usage import Usage, month_bounds, read
from dlrig.report import envelope

SCHEMA = "dlrig.plan.cost"
SCHEMA_VERSION = 1
HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True)
class Saving:
    name: str
    usd_per_year: float
    summary: str
    detail: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "usd_per_year": round(self.usd_per_year, 2),
            "detail": list(self.detail),
        }


@dataclass(frozen=True)
class CostReport:
    usage: Usage
    price_per_kwh: float
    pue: float
    energy_kwh: float  # at the wall, GPUs + host, in the recorded period, PUE included
    cost_usd: float
    month_hours: float
    year_scale: float  # recorded hours -> a year
    capex_usd: float | None
    capex_basis: str
    savings: tuple[Saving, ...]
    inputs: tuple[Input, ...] = field(default_factory=tuple)

    @property
    def recorded_hours(self) -> float:
        return self.usage.seconds / 3600

    @property
    def cost_month_usd(self) -> float:
        return (
            self.cost_usd * self.month_hours / self.recorded_hours if self.recorded_hours else 0.0
        )

    @property
    def cost_year_usd(self) -> float:
        return self.cost_usd * self.year_scale

    def to_dict(self) -> dict[str, Any]:
        u = self.usage
        return envelope(
            SCHEMA,
            SCHEMA_VERSION,
            {
                "path": u.path,
                "month": u.month,
                "from_unix": u.from_unix,
                "to_unix": u.to_unix,
                "recorded_hours": self.recorded_hours,
                "extrapolated": self.recorded_hours < self.month_hours * 0.95,
                "gpus": [
                    {
                        "index": g.index,
                        "name": g.name,
                        "catalogue_id": g.catalogue_id,
                        "utilization_mean_percent": g.utilization_mean_percent,
                        "busy_fraction": g.busy_seconds / g.seconds if g.seconds else None,
                        "busy_power_watts": g.busy_power_watts,
                        "idle_power_watts": g.idle_power_watts,
                        "energy_kwh": g.energy_kwh,
                    }
                    for g in u.gpus
                ],
                "utilization_mean_percent": u.utilization_mean_percent,
                "busy_fraction": u.busy_fraction,
                "idle_periods_hours": [round((b - a) / 3600, 6) for a, b in u.idle_periods],
                "price_per_kwh": self.price_per_kwh,
                "pue": self.pue,
                "energy_kwh": self.energy_kwh,
                "cost_usd": self.cost_usd,
                "cost_month_usd": self.cost_month_usd,
                "cost_year_usd": self.cost_year_usd,
                "capex_usd": self.capex_usd,
                "capex_basis": self.capex_basis,
                "savings": [s.to_dict() for s in self.savings],
                "savings_usd_per_year": round(sum(s.usd_per_year for s in self.savings), 2),
                "inputs": [i.to_dict() for i in self.inputs],
            },
        )


def _capex(usage: Usage, given: float | None) -> tuple[float | None, str]:
    if given is not None:
        return given, "--capex"
    total = 0.0
    for gpu in usage.gpus:
        price = knowledge.gpu_price(gpu.catalogue_id, "new") if gpu.catalogue_id else None
        if price is None:
            return None, f"no price for {gpu.name} in plan_gpu_prices.csv: give --capex"
        total += price.price_usd
    return (
        total,
        "GPU street prices only (plan_gpu_prices.csv, new); give --capex for the whole server",
    )


def cost(
    path: str | Path,
    inputs: Inputs,
    month: str | None = None,
    capex_usd: float | None = None,
    min_idle_minutes: float | None = None,
) -> CostReport:
    """What a server's recorded use cost (energy in kWh and USD at `inputs`' prices) and what
    idle time and power caps would save, from a `dlrig monitor` history at `path`
    (`dlrig plan cost --history`)."""
    usage = read(path, month)
    price = inputs.number("electricity_usd_per_kwh")
    pue = inputs.number("pue")
    host_watts = inputs.number("host_idle_watts")
    hours = usage.seconds / 3600
    gpu_kwh = usage.gpu_energy_kwh
    # The history holds GPU power only; the host is counted at its idle ASSUMPTION.
    energy = (gpu_kwh + host_watts * hours / 1000) * pue
    _, month_start, month_end = month_bounds(usage.month, usage.to_unix)
    month_hours = (month_end - month_start) / 3600
    scale = HOURS_PER_YEAR / hours if hours else 0.0
    capex, basis = _capex(usage, capex_usd)
    minimum = (
        min_idle_minutes
        if min_idle_minutes is not None
        else inputs.number("sleep_min_idle_minutes")
    )
    savings = (
        _sleep(usage, inputs, price, pue, scale, minimum),
        _sharing(usage, inputs, price, pue, capex),
        _spot(usage, inputs, price, pue, scale, capex, energy * price * scale),
    )
    return CostReport(
        usage,
        price,
        pue,
        energy,
        energy * price,
        month_hours,
        scale,
        capex,
        basis,
        savings,
        tuple(inputs.used()),
    )


def _sleep(
    usage: Usage, inputs: Inputs, price: float, pue: float, scale: float, minimum_minutes: float
) -> Saving:
    long_enough = [(a, b) for a, b in usage.idle_periods if (b - a) >= minimum_minutes * 60]
    hours = sum(b - a for a, b in long_enough) / 3600
    idle_watts = usage.idle_power_watts + inputs.number("host_idle_watts")
    saved_watts = max(0.0, idle_watts - inputs.number("standby_watts"))
    value = hours * scale * saved_watts / 1000 * pue * price
    return Saving(
        "night sleep over IPMI",
        value,
        f"{len(long_enough)} whole-server idle stretch(es) of >= {minimum_minutes:g} min, {hours:.3g} h recorded "
        f"({hours * scale:,.0f} h/year): {saved_watts:,.0f} W saved while off",
        (
            f"idle draw: GPUs {usage.idle_power_watts:,.0f} W (measured) + host {inputs.number('host_idle_watts'):g} W (ASSUMPTION); off: {inputs.number('standby_watts'):g} W (ASSUMPTION)",
            "schedule: Slurm SuspendProgram/ResumeProgram calling `ipmitool -I lanplus -H BMC -U USER -f PASSFILE chassis power soft` / `power on`",
        ),
    )


def _sharing(usage: Usage, inputs: Inputs, price: float, pue: float, capex: float | None) -> Saving:
    count = len(usage.gpus)
    work = sum((g.utilization_mean_percent or 0.0) / 100 for g in usage.gpus)
    target = inputs.number("sharing_target_utilisation")
    needed = max(1, math.ceil(work / target - 1e-9)) if work else 1
    freed = max(0, count - needed)
    if freed == 0:
        return Saving(
            "GPU sharing",
            0.0,
            f"the measured work ({work:.2f} GPUs' worth) needs all {count} GPU(s) at {target:.0%} utilisation",
        )
    idle = [g.idle_power_watts for g in usage.gpus if g.idle_power_watts is not None]
    idle_watts = sum(idle) / len(idle) if idle else 0.0
    energy = freed * idle_watts * HOURS_PER_YEAR / 1000 * pue * price
    years = inputs.number("years_of_service")
    hardware = freed / count * capex / years if capex else 0.0
    return Saving(
        "GPU sharing",
        energy + hardware,
        f"{work:.2f} GPUs' worth of work on {count} GPUs: packed at {target:.0%} it needs {needed}, freeing {freed}",
        (
            f"energy of {freed} idle GPU(s) at {idle_watts:.0f} W (measured): ${energy:,.0f}/year",
            f"their share of the purchase over {years:g} years: ${hardware:,.0f}/year"
            if capex
            else "no capex known: give --capex to value the freed GPUs",
            "how: MIG or time-slicing (Kubernetes device plugin sharing, Slurm shared GRES) so several jobs share a GPU",
        ),
    )


def _spot(
    usage: Usage,
    inputs: Inputs,
    price: float,
    pue: float,
    scale: float,
    capex: float | None,
    energy_year: float,
) -> Saving:
    duty = usage.busy_fraction
    threshold = inputs.number("bursty_duty_cycle")
    if duty >= threshold:
        return Saving(
            "bursty jobs to spot",
            0.0,
            f"busy {duty:.0%} of the time (>= {threshold:.0%}): steady load, owning is the cheaper way",
        )
    gpu = usage.gpus[0].catalogue_id if usage.gpus else None
    spot = sorted(
        (o for o in offers(inputs, (gpu,) if gpu else ()) if o.pricing == "spot"),
        key=lambda o: o.usd_per_gpu_hour,
    )
    if not spot or capex is None:
        why = (
            "no spot price for this GPU in plan_cloud_prices.csv"
            if not spot
            else "no capex known (give --capex)"
        )
        return Saving("bursty jobs to spot", 0.0, f"busy {duty:.0%} of the time, but {why}")
    offer = spot[0]
    busy_gpu_hours = sum(g.busy_seconds for g in usage.gpus) / 3600 * scale
    overhead = inputs.number("spot_interruption_overhead")
    rent = busy_gpu_hours * (1 + overhead) * offer.usd_per_gpu_hour
    own = capex / inputs.number("years_of_service") + energy_year
    value = max(0.0, own - rent)
    return Saving(
        "bursty jobs to spot",
        value,
        f"busy {duty:.0%} of the time: {busy_gpu_hours:,.0f} GPU-h/year on {offer.label} at ${offer.usd_per_gpu_hour:.2f}/GPU-h = ${rent:,.0f}/year against owning ${own:,.0f}/year",
        (
            f"spot price: {offer.source[:160]} ({offer.as_of})",
            f"owning: capex over {inputs.number('years_of_service'):g} years + energy",
        ),
    )

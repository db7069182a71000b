"""GPU checks, power and heat: clock slowdowns, temperature, power limits.
`nvidia-smi -q -d PERFORMANCE,TEMPERATURE,POWER` shows the same readings."""

from __future__ import annotations

from dlrig.doctor import facts
from dlrig.doctor.gpu_evidence import gpu_check, per_gpu
from dlrig.doctor.registry import Check, DoctorOptions
from dlrig.machine.model import Gpu, Machine
from dlrig.report import CheckResult

_THROTTLE = {
    "hw_slowdown": "HW slowdown (power brake or thermal, set by the board)",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake (external power signal)",
    "sw_thermal_slowdown": "SW thermal slowdown",
}


def _slowdowns(g: Gpu) -> list[str]:
    return [r for r in g.clocks_event_reasons or () if r in _THROTTLE]


@gpu_check("gpu.throttle", "no thermal or hardware clock slowdown")
def throttle(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """nvidia-smi's 'clocks event reasons' say why clocks are below maximum. Idle and the
    software power cap are normal; thermal and hardware slowdowns mean cooling, airflow or power
    delivery is not keeping up and every step runs slower."""
    known = [g for g in gpus if g.clocks_event_reasons is not None]
    if not known:
        return c.skip("clock event reasons not in this snapshot")
    hot = [g for g in known if _slowdowns(g)]
    capped = [
        g for g in known if not _slowdowns(g) and "sw_power_cap" in (g.clocks_event_reasons or ())
    ]
    if hot:
        return per_gpu(
            c.warn,
            f"{len(hot)} GPU(s) are slowed down by thermal or hardware limits",
            hot,
            lambda g: (
                f"{facts.gpu_label(g)}: {', '.join(_THROTTLE[r] for r in _slowdowns(g))}"
                + (f", {g.temperature_c:.0f} °C" if g.temperature_c is not None else "")
            ),
            "nvidia-smi -q -d PERFORMANCE",
            fix="Improve cooling (fan curves, airflow, blanking panels, room temperature); check "
            "PSU capacity and the GPU's power cables; for HW power brake check the chassis' power "
            "management.",
        )
    if capped:
        return per_gpu(
            c.info,
            f"{len(capped)} GPU(s) at their power cap (normal under full load)",
            capped,
            lambda g: (
                f"{facts.gpu_label(g)}: {g.power_draw_watts or 0:.0f} W of "
                f"{g.power_limit_watts or 0:.0f} W"
            ),
        )
    return c.ok("no thermal or hardware slowdown")


def _near_slowdown(g: Gpu) -> bool:
    # Thresholds of 20 °C or less are T.Limit-relative readings, not absolute degrees.
    slowdown = g.temperature_slowdown_c
    return bool(
        g.temperature_c is not None
        and slowdown
        and slowdown > 20
        and g.temperature_c >= slowdown - 5
    )


@gpu_check("gpu.temperature", "GPU temperatures below the slowdown threshold")
def temperature(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """Within a few degrees of its slowdown threshold a GPU starts to lower its clocks."""
    known = [g for g in gpus if g.temperature_c is not None]
    if not known:
        return c.skip("temperatures not in this snapshot")
    near = [g for g in known if _near_slowdown(g)]
    if near:
        return per_gpu(
            c.warn,
            f"{len(near)} GPU(s) within 5 °C of thermal slowdown",
            near,
            lambda g: (
                f"{facts.gpu_label(g)}: {g.temperature_c:.0f} °C, slowdown at "
                f"{g.temperature_slowdown_c:.0f} °C"
            ),
            fix="Improve cooling and airflow; check fans (`nvidia-smi -q -d TEMPERATURE`).",
        )
    return per_gpu(
        c.ok,
        "GPU temperatures normal",
        known,
        lambda g: f"{facts.gpu_label(g)}: {g.temperature_c:.0f} °C",
    )


@gpu_check("gpu.power_limit", "power limits are at their defaults")
def power_limit(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """A power limit set below the board's default (`nvidia-smi -pl`) caps throughput; it is
    sometimes deliberate (noise, PSU headroom), often forgotten."""
    known = [g for g in gpus if g.power_limit_watts and g.power_default_limit_watts]
    if not known:
        return c.skip("power limits not in this snapshot")
    low = [
        g for g in known if (g.power_limit_watts or 0) < 0.9 * (g.power_default_limit_watts or 0)
    ]
    if low:
        return per_gpu(
            c.warn,
            f"{len(low)} GPU(s) have a power limit below their default",
            low,
            lambda g: (
                f"{facts.gpu_label(g)}: limit {g.power_limit_watts:.0f} W, default "
                f"{g.power_default_limit_watts:.0f} W"
            ),
            "nvidia-smi -q -d POWER",
            fix="If not deliberate: sudo nvidia-smi -i N -pl <default watts>",
        )
    return c.ok("power limits at their defaults")

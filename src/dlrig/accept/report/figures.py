"""Figures the page shows in tables and `--compare` compares: per GPU under load, per host
load, from a burn-in as its document holds it."""

from __future__ import annotations

import statistics
from typing import Any

BUSY_PERCENT = 50.0
SLOWDOWN = frozenset(
    {"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown", "hw_power_brake_slowdown"}
)


def _median(values: list[Any]) -> float | None:
    numbers = [float(v) for v in values if isinstance(v, int | float)]
    return statistics.median(numbers) if numbers else None


def gpu_figures(burn_in: dict[str, Any]) -> list[dict[str, Any]]:
    loads = {
        load["subject"]: load
        for load in burn_in.get("loads") or ()
        if load.get("kind") == "gpu" and load.get("subject") is not None
    }
    rows = []
    for gpu in burn_in.get("gpus") or ():
        util = gpu.get("utilization_percent") or []
        busy = [i for i, u in enumerate(util) if isinstance(u, int | float) and u >= BUSY_PERCENT]

        def under_load(name: str, busy: list[int] = busy, gpu: dict[str, Any] = gpu) -> list[Any]:
            column = gpu.get(name) or []
            return [column[i] for i in busy if i < len(column)]

        events = gpu.get("clock_events") or []
        judged = [set(events[i]) for i in busy if i < len(events) and events[i] is not None]
        throttled = sum(1 for e in judged if e & SLOWDOWN) / len(judged) if judged else None
        temps = [t for t in under_load("temperature_c") if isinstance(t, int | float)]
        load = loads.get(gpu.get("index"))
        rows.append(
            {
                "index": gpu.get("index"),
                "name": gpu.get("name"),
                "readings": gpu.get("points"),
                "readings_under_load": len(busy),
                "tflops": _median((load or {}).get("tflops") or []),
                "dtype": ((load or {}).get("detail") or {}).get("dtype"),
                "copy_gb_s": _median((load or {}).get("copy_gb_s") or []),
                "sm_clock_mhz": _median(under_load("sm_clock_mhz")),
                "sm_clock_max_mhz": gpu.get("sm_clock_max_mhz"),
                "power_watts": _median(under_load("power_watts")),
                "temperature_max_c": max(temps) if temps else None,  # under load
                "throttled_share": throttled,
                "load_error": (load or {}).get("error"),
            }
        )
    return rows


def load_figures(burn_in: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for load in burn_in.get("loads") or ():
        if load.get("kind") == "gpu":
            continue
        units = load.get("units") or {}
        for metric, unit in units.items():
            if metric == "mismatched_chunks":
                continue
            rows.append(
                {
                    "kind": load.get("kind"),
                    "metric": metric,
                    "unit": unit,
                    "workers": load.get("workers"),
                    "median": _median(load.get(metric) or []),
                    "error": load.get("error"),
                }
            )
    return rows

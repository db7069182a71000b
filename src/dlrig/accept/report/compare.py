"""`dlrig report --compare OLD`: what changed since an earlier run.

The machine's facts first (a driver upgrade, a swapped card: the changes that explain the
others), then what got worse, then what got better. Measured figures count as changed when
they moved more than run-to-run noise: 10% for bench results, 5% for a GPU's speed under the
same burn-in load, 15% for host loads (shared hosts are noisy), 5 °C for temperatures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dlrig.accept.report import facts as machine_facts
from dlrig.accept.verdict import Verdict

BENCH_CHANGE = 0.10
GPU_CHANGE = 0.05
HOST_CHANGE = 0.15
TEMPERATURE_CHANGE_C = 5.0
LOWER_IS_BETTER_UNITS = frozenset({"s", "ms", "us", "µs"})
# Facts where more is better (a count or size); for the others a change is just a change.
MORE_IS_BETTER = frozenset(
    {"gpu_count", "memory_total_bytes", "pcie_width_current", "power_limit_watts"}
)


def _show(key: str, value: Any) -> str:
    if value is None:
        return "—"
    if key.endswith("_bytes") and isinstance(value, int | float):
        return f"{value / 2**30:.1f} GiB"
    if key.endswith("_watts") and isinstance(value, int | float):
        return f"{value:.0f} W"
    if key == "pcie_width_current":
        return f"x{value}"
    return str(value)


def _direction(key: str, old: Any, new: Any) -> str:
    if key in MORE_IS_BETTER and isinstance(old, int | float) and isinstance(new, int | float):
        return "better" if new > old else "worse"
    return "changed"


def _machine(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not old or not new:
        return []
    found = []
    for key, label in machine_facts.COMPARED:
        a, b = old.get(key), new.get(key)
        if a is not None and b is not None and a != b:
            found.append(
                {
                    "area": "machine",
                    "what": label,
                    "old": _show(key, a),
                    "new": _show(key, b),
                    "direction": _direction(key, a, b),
                }
            )
    old_gpus = {g["index"]: g for g in old.get("gpus") or ()}
    for gpu in new.get("gpus") or ():
        before = old_gpus.get(gpu["index"])
        if before is None:
            continue
        for key, label in machine_facts.GPU_COMPARED:
            a, b = before.get(key), gpu.get(key)
            if a is not None and b is not None and a != b:
                found.append(
                    {
                        "area": "machine",
                        "what": f"GPU {gpu['index']} {label}",
                        "old": _show(key, a),
                        "new": _show(key, b),
                        "direction": _direction(key, a, b),
                    }
                )
    return found


def _moved(old: float, new: float, threshold: float, lower_is_better: bool = False) -> str | None:
    if not old:
        return None
    change = (new - old) / abs(old)
    if abs(change) < threshold:
        return None
    better = change < 0 if lower_is_better else change > 0
    return "better" if better else "worse"


def _bench(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    def keyed(sections: Sequence[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
        return {
            (r["part"], r["test"], r.get("gpu_index")): r
            for section in sections
            for r in section["results"]
            if isinstance(r.get("value"), int | float)
        }

    before, after = keyed(old), keyed(new)
    found = []
    for key, result in after.items():
        earlier = before.get(key)
        if earlier is None:
            continue
        unit = result.get("unit") or ""
        direction = _moved(
            float(earlier["value"]),
            float(result["value"]),
            BENCH_CHANGE,
            unit in LOWER_IS_BETTER_UNITS,
        )
        if direction:
            part, test, gpu = key
            found.append(
                {
                    "area": "bench",
                    "what": f"{part} {test}" + (f" on GPU {gpu}" if gpu is not None else ""),
                    "old": f"{earlier['value']:g} {unit}",
                    "new": f"{result['value']:g} {unit}",
                    "direction": direction,
                    "percent": round(
                        100 * (result["value"] - earlier["value"]) / earlier["value"], 1
                    ),
                }
            )
    return found


def _burn_in(old: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    if not old or not new:
        return []
    found = []
    before = {g["index"]: g for g in old[-1]["gpu_figures"]}
    for gpu in new[-1]["gpu_figures"]:
        earlier = before.get(gpu["index"])
        if earlier is None:
            continue
        for key, label, unit in (
            ("tflops", "matmul under load", "TFLOP/s"),
            ("sm_clock_mhz", "SM clock under load", "MHz"),
        ):
            a, b = earlier.get(key), gpu.get(key)
            if a and b:
                direction = _moved(a, b, GPU_CHANGE)
                if direction:
                    found.append(
                        {
                            "area": "burn-in",
                            "what": f"GPU {gpu['index']} {label}",
                            "old": f"{a:.1f} {unit}",
                            "new": f"{b:.1f} {unit}",
                            "direction": direction,
                            "percent": round(100 * (b - a) / a, 1),
                        }
                    )
        a, b = earlier.get("temperature_max_c"), gpu.get("temperature_max_c")
        if a is not None and b is not None and abs(b - a) >= TEMPERATURE_CHANGE_C:
            found.append(
                {
                    "area": "burn-in",
                    "what": f"GPU {gpu['index']} hottest reading under load",
                    "old": f"{a:.0f} °C",
                    "new": f"{b:.0f} °C",
                    "direction": "worse" if b > a else "better",
                }
            )
    host_before = {(r["kind"], r["metric"]): r for r in old[-1]["load_figures"]}
    for row in new[-1]["load_figures"]:
        earlier = host_before.get((row["kind"], row["metric"]))
        if earlier and earlier.get("median") and row.get("median"):
            direction = _moved(earlier["median"], row["median"], HOST_CHANGE)
            if direction:
                found.append(
                    {
                        "area": "burn-in",
                        "what": f"{row['kind']} load {row['metric']}",
                        "old": f"{earlier['median']:.1f} {row['unit']}",
                        "new": f"{row['median']:.1f} {row['unit']}",
                        "direction": direction,
                    }
                )
    return found


def _verdicts(old: Sequence[Verdict], new: Sequence[Verdict]) -> list[dict[str, Any]]:
    def failing(verdicts: Sequence[Verdict]) -> dict[tuple[str, int | None], Verdict]:
        return {(v.id, v.gpu): v for v in verdicts if v.status == "fail"}

    before, after = failing(old), failing(new)
    judged_before = {(v.id, v.gpu) for v in old}
    judged_now = {(v.id, v.gpu) for v in new}
    found = []
    # A verdict that fails in one report, was judged in the other and did not fail there.
    for failed, other, judged_other, old_word, new_word, direction in (
        (after, before, judged_before, "passed", "fails", "worse"),
        (before, after, judged_now, "failed", "passes", "better"),
    ):
        for key, verdict in failed.items():
            if key not in other and key in judged_other:
                found.append(
                    {
                        "area": "verdict",
                        "what": verdict.title,
                        "old": old_word,
                        "new": new_word,
                        "direction": direction,
                    }
                )
    return found


def changes(
    old: dict[str, Any],
    new: dict[str, Any],
    old_verdicts: Sequence[Verdict],
    new_verdicts: Sequence[Verdict],
) -> list[dict[str, Any]]:
    measured = (
        _bench(old["bench"], new["bench"])
        + _burn_in(old["burn_ins"], new["burn_ins"])
        + _verdicts(old_verdicts, new_verdicts)
    )
    order = {"worse": 0, "changed": 1, "better": 2}
    measured.sort(key=lambda c: order[c["direction"]])
    return _machine(old["machine"], new["machine"]) + measured

"""The page's charts: matplotlib drawn as inline SVG (text stays text, prints sharp to PDF).

Every chart is drawn from the page document alone. A chart with nothing to draw is left out;
the section's table says what is missing and why.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dlrig.extras import pyplot

SLOWDOWN = frozenset(
    {"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown", "hw_power_brake_slowdown"}
)
VERDICT_COLOURS = {"ok": "#2e7d32", "info": "#78909c", "low": "#c62828", "fail": "#6d1b1b"}
SIZE = (6.4, 2.3)


@dataclass(frozen=True)
class _LoadChart:
    """How the chart of one kind of host load is drawn: `title` may name the load's fields,
    `lines` are (label, the load's series)."""

    title: str
    unit: str
    lines: tuple[tuple[str, str], ...]
    dots: bool = False


_LOAD_CHARTS = {
    "cpu": _LoadChart(
        "CPU load ({workers} worker(s), SHA-256)", "MB/s", (("all workers", "hash_mb_s"),)
    ),
    "memory": _LoadChart("Host memory copies", "GB/s", (("read + write", "copy_gb_s"),)),
    # A disk load writes and reads in alternate phases: each value a dot, not a line.
    "disk": _LoadChart(
        "Disk load",
        "MB/s",
        (("write + fsync", "write_mb_s"), ("read back", "read_mb_s")),
        dots=True,
    ),
}


@dataclass(frozen=True)
class Chart:
    id: str
    title: str
    svg: str


def _pyplot() -> Any:
    plt = pyplot("report", "the report's charts")
    plt.rcParams.update(
        {
            "svg.fonttype": "none",  # text as <text>: searchable, selectable, small
            "font.size": 8,
            "font.family": "sans-serif",
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "legend.frameon": False,
        }
    )
    return plt


def _svg(plt: Any, figure: Any, chart_id: str) -> str:
    # A salt per chart keeps the ids of clip paths and markers distinct across inline SVGs.
    plt.rcParams["svg.hashsalt"] = chart_id
    buffer = io.StringIO()
    figure.tight_layout(pad=0.4)
    figure.savefig(buffer, format="svg")
    plt.close(figure)
    text = buffer.getvalue()
    text = re.sub(r"^.*?(<svg\b)", r"\1", text, count=1, flags=re.S)  # drop the XML prolog
    # matplotlib names its elements figure_1, axes_1, ... in every SVG: inline, they must be
    # unique in the page, and every reference must follow its element.
    text = re.sub(r'\bid="([^"]+)"', rf'id="{chart_id}-\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{chart_id}-\1)", text)
    text = re.sub(r'href="#([^"]+)"', rf'href="#{chart_id}-\1"', text)
    return re.sub(r"<svg\b", f'<svg role="img" aria-label="{chart_id}"', text, count=1)


def _numbers(values: Sequence[Any]) -> list[float | None]:
    return [float(v) if isinstance(v, int | float) else None for v in values]


def _lines(
    plt: Any,
    chart_id: str,
    title: str,
    unit: str,
    series: Sequence[tuple[str, Sequence[Any], Sequence[Any]]],
    marks: Sequence[tuple[str, Sequence[float], Sequence[float]]] = (),
    limits: Sequence[tuple[str, float]] = (),
    categories: Sequence[str] | None = None,
    dots: bool = False,
    xlabel: str = "seconds into the burn-in",
) -> Chart | None:
    """Lines over time. A missing value is a gap in the line (a GPU that did not answer), or,
    with `dots`, each value a dot (a disk load writes and reads in alternate phases: a line
    between the phases would draw values nobody measured)."""
    drawn = [
        (name, xs, _numbers(ys))
        for name, xs, ys in series
        if any(isinstance(y, int | float) for y in ys)
    ]
    if not drawn:
        return None
    figure, axes = plt.subplots(figsize=SIZE)
    for name, xs, ys in drawn:
        points = list(zip(xs, ys, strict=False))
        if dots:
            kept = [(x, y) for x, y in points if y is not None]
            axes.scatter([x for x, _ in kept], [y for _, y in kept], s=6, label=name)
            continue
        axes.plot(
            [x for x, _ in points],
            [float("nan") if y is None else y for _, y in points],
            label=name,
            linewidth=1.2,
            marker="o" if categories else None,
            markersize=3,
            linestyle=":" if categories else "-",
        )
    for name, mark_x, mark_y in marks:
        if mark_x:
            axes.scatter(mark_x, mark_y, s=12, color="#c62828", marker="x", label=name, zorder=3)
    for name, value in limits:
        axes.axhline(value, color="#555", linestyle="--", linewidth=0.8)
        axes.annotate(
            name,
            (1.0, value),
            xycoords=("axes fraction", "data"),
            ha="right",
            va="bottom",
            fontsize=7,
            color="#555",
        )
    axes.set_title(title, loc="left", fontsize=9)
    axes.set_ylabel(unit)
    if categories:
        axes.set_xticks(range(len(categories)), categories, rotation=0, fontsize=7)
    else:
        axes.set_xlabel(xlabel)
    if len(drawn) > 1 or marks:
        axes.legend(loc="best", fontsize=7)
    return Chart(chart_id, title, _svg(plt, figure, chart_id))


def burn_in(section: dict[str, Any], key: str) -> list[Chart]:
    plt = _pyplot()
    charts: list[Chart | None] = []
    gpus = section.get("gpus") or []
    replay = section.get("mode") == "replay"
    categories = None
    if replay:
        labels = max((g.get("labels") or [] for g in gpus), key=len, default=[])
        if len(labels) < 2:
            return []  # one recorded state per GPU: the tables say it all
        categories = [label.rsplit(":", 1)[-1] for label in labels]

    def xs(gpu: dict[str, Any]) -> list[float]:
        return list(range(len(gpu["t"]))) if replay else list(gpu["t"])

    def gpu_series(name: str) -> list[tuple[str, list[float], list[Any]]]:
        return [(f"GPU {g['index']}", xs(g), g.get(name) or []) for g in gpus]

    def gpu_chart(
        chart: str,
        title: str,
        unit: str,
        reading: str,
        marks: Sequence[tuple[str, Sequence[float], Sequence[float]]] = (),
        limits: Sequence[tuple[str, float]] = (),
    ) -> Chart | None:
        """A line per GPU of one reading."""
        return _lines(
            plt, f"{key}-{chart}", title, unit, gpu_series(reading), marks, limits, categories
        )

    throttled: list[tuple[str, list[float], list[float]]] = []
    for gpu in gpus:
        points = [
            (x, c)
            for x, c, e in zip(
                xs(gpu), gpu.get("sm_clock_mhz") or [], gpu.get("clock_events") or [], strict=False
            )
            if e and SLOWDOWN & set(e) and isinstance(c, int | float)
        ]
        if points:
            throttled.append(
                (f"GPU {gpu['index']} slowdown", [p[0] for p in points], [p[1] for p in points])
            )
    slowdown = [g.get("temperature_slowdown_c") for g in gpus if g.get("temperature_slowdown_c")]
    limits = [
        v for g in gpus for v in (g.get("power_limit_watts") or []) if isinstance(v, int | float)
    ]
    charts += [
        gpu_chart("clock", "GPU SM clock", "MHz", "sm_clock_mhz", throttled),
        gpu_chart(
            "temperature",
            "GPU temperature",
            "°C",
            "temperature_c",
            limits=[("slowdown", min(slowdown))] if slowdown else (),
        ),
        gpu_chart(
            "power",
            "GPU power",
            "W",
            "power_watts",
            limits=[("power limit", max(limits))] if limits else (),
        ),
    ]
    loads = section.get("loads") or []
    gpu_loads = [
        (f"GPU {load['subject']}", load["t"], load.get("tflops") or [])
        for load in loads
        if load["kind"] == "gpu"
    ]
    charts.append(
        _lines(plt, f"{key}-tflops", "GPU matmul throughput (load)", "TFLOP/s", gpu_loads)
    )
    host = section.get("host") or {}
    if host.get("t"):
        charts.append(
            _lines(
                plt,
                f"{key}-host-cpu",
                "Host CPU busy",
                "%",
                [
                    ("CPU", host["t"], host.get("cpu_percent") or []),
                    ("I/O wait", host["t"], host.get("iowait_percent") or []),
                ],
            )
        )
    for load in loads:
        drawn = _LOAD_CHARTS.get(load["kind"])
        if drawn is not None:
            charts.append(
                _lines(
                    plt,
                    f"{key}-{load['kind']}-load",
                    drawn.title.format_map(load),
                    drawn.unit,
                    [(label, load["t"], load.get(series) or []) for label, series in drawn.lines],
                    dots=drawn.dots,
                )
            )
    return [c for c in charts if c is not None]


def bench(section: dict[str, Any], key: str) -> list[Chart]:
    plt = _pyplot()
    by_unit: dict[str, list[dict[str, Any]]] = {}
    for result in section.get("results") or ():
        if isinstance(result.get("value"), int | float) and result.get("unit"):
            by_unit.setdefault(result["unit"], []).append(result)
    charts = []
    for number, (unit, results) in enumerate(by_unit.items()):
        names = [
            f"{r['part']} {r['test']}"
            + (f" (GPU {r['gpu_index']})" if r.get("gpu_index") is not None else "")
            for r in results
        ]
        values = [float(r["value"]) for r in results]
        figure, axes = plt.subplots(figsize=(SIZE[0], max(1.6, 0.6 + 0.32 * len(results))))
        rows = list(range(len(results)))[::-1]
        colours = [VERDICT_COLOURS.get(str(r.get("verdict")), "#78909c") for r in results]
        axes.barh(rows, values, color=colours, height=0.6, label="measured")
        expected = [
            (y, float(r["expected"]))
            for y, r in zip(rows, results, strict=True)
            if r.get("expected")
        ]
        if expected:
            axes.scatter(
                [e for _, e in expected],
                [y for y, _ in expected],
                marker="|",
                s=260,
                color="#111",
                linewidths=2,
                label="expected",
                zorder=3,
            )
            axes.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, fontsize=7)
        for y, value in zip(rows, values, strict=True):
            axes.annotate(f" {value:g}", (value, y), va="center", fontsize=7)
        axes.set_yticks(rows, names)
        axes.set_xlabel(unit)
        axes.set_title(f"Measured vs expected: {unit}", loc="left", fontsize=9)
        axes.grid(axis="y", alpha=0)
        axes.set_xlim(0, max(values + [e for _, e in expected]) * 1.18 or 1)
        charts.append(
            Chart(
                f"{key}-{number}",
                f"Measured vs expected ({unit})",
                _svg(plt, figure, f"{key}-{number}"),
            )
        )
    return charts


def fit(section: dict[str, Any], key: str) -> list[Chart]:
    breakdown = {
        k: v
        for k, v in (section.get("breakdown") or {}).items()
        if isinstance(v, int | float) and v > 0
    }
    capacity = section.get("gpu_memory_bytes")
    if not breakdown:
        return []
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(SIZE[0], 1.9))
    left = 0.0
    palette = plt.get_cmap("tab20").colors
    for number, (name, value) in enumerate(breakdown.items()):
        gib = value / 2**30
        axes.barh(
            [0],
            [gib],
            left=left,
            color=palette[number % len(palette)],
            label=f"{name.replace('_', ' ')} {gib:.1f} GiB",
            height=0.5,
        )
        left += gib
    if isinstance(capacity, int | float):
        axes.axvline(capacity / 2**30, color="#c62828", linestyle="--", linewidth=1.5)
        axes.annotate(
            f"GPU memory {capacity / 2**30:.0f} GiB",
            (capacity / 2**30, 0.32),
            xytext=(4, 0),
            textcoords="offset points",
            fontsize=7,
            color="#c62828",
        )
    axes.set_ylim(-0.4, 0.45)
    axes.set_yticks([])
    axes.set_xlabel("GiB per GPU")
    axes.set_title(
        f"Memory per GPU: {section.get('model')} on {section.get('gpu')}", loc="left", fontsize=9
    )
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.55), ncol=3, fontsize=7)
    return [Chart(f"{key}-memory", "Memory per GPU", _svg(plt, figure, f"{key}-memory"))]


def monitor(section: dict[str, Any], key: str) -> list[Chart]:
    gpus = section.get("gpus") or []
    if not gpus:
        return []
    plt = _pyplot()
    charts = []
    for name, title, unit in (
        ("utilization_percent", "GPU utilisation", "%"),
        ("power_watts", "GPU power", "W"),
        ("temperature_c", "GPU temperature", "°C"),
    ):
        chart = _lines(
            plt,
            f"{key}-{name}",
            title,
            unit,
            [(f"GPU {g['index']}", g["t"], g.get(name) or []) for g in gpus],
            xlabel="seconds into the recording",
        )
        if chart is not None:
            charts.append(chart)
    return charts


def for_page(page: dict[str, Any]) -> dict[str, list[Chart]]:
    """Charts by where they go: "burn_ins:0", "bench:0", "fits:0", "monitor:0"."""
    drawn: dict[str, list[Chart]] = {}
    for number, section in enumerate(page.get("burn_ins") or ()):
        drawn[f"burn_ins:{number}"] = burn_in(section, f"burn-in-{number}")
    for number, section in enumerate(page.get("bench") or ()):
        drawn[f"bench:{number}"] = bench(section, f"bench-{number}")
    for number, section in enumerate(page.get("fits") or ()):
        drawn[f"fits:{number}"] = fit(section, f"fit-{number}")
    for number, section in enumerate(page.get("monitor") or ()):
        drawn[f"monitor:{number}"] = monitor(section, f"monitor-{number}")
    return drawn

"""What a recorded history says: utilisation distribution, idle periods, throttled time,
energy and its cost, and plots.

Every sample stands for the time until the next one (capped at three median intervals, so a
gap while the recorder was stopped does not count as busy or idle time).
"""

from __future__ import annotations

import io
import itertools
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from dlrig.errors import InputError
from dlrig.extras import pyplot, require
from dlrig.machine.nvml import CLOCK_EVENT_BITS
from dlrig.monitor import history_rows
from dlrig.monitor.history import open_history
from dlrig.monitor.history_rows import GpuRow
from dlrig.outputs import ensure_directory, write_bytes_atomic
from dlrig.plain import from_plain
from dlrig.report import envelope

SCHEMA_NAME = "dlrig.monitor.report"
SCHEMA_VERSION = 1
EnergyMethod = Literal["counter", "integrated power", "counter and integrated power"]

# Reasons that cost performance; gpu_idle and the clock settings are not slowdowns.
SLOWDOWN_REASONS = (
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
BUCKETS = ((0, 10), (10, 50), (50, 90), (90, 101))


@dataclass(frozen=True)
class IdlePeriod:
    start_unix: float
    end_unix: float

    @property
    def seconds(self) -> float:
        return self.end_unix - self.start_unix


@dataclass(frozen=True)
class XidRecord:
    """One Xid event the recorder saw (NVML's event set), `count` times at `ts_unix`."""

    ts_unix: float
    gpu: int | None
    pci_bus_id: str | None
    xid: int
    count: int


@dataclass(frozen=True)
class GpuReport:
    gpu: int
    name: str | None
    uuid: str | None
    samples: int
    seconds: float
    unavailable_seconds: float
    utilization_mean_percent: float | None
    utilization_median_percent: float | None
    utilization_distribution: dict[str, float]  # "0-10%" -> fraction of the time
    sm_activity_mean_percent: float | None
    idle_seconds: float
    idle_periods: tuple[IdlePeriod, ...]
    throttled_seconds: float
    throttled_seconds_by_reason: dict[str, float]
    memory_used_max_bytes: int | None
    temperature_max_c: float | None
    power_mean_watts: float | None
    energy_kwh: float | None
    energy_method: EnergyMethod | None


@dataclass(frozen=True)
class HistoryReport:
    path: str
    from_unix: float | None
    to_unix: float | None
    interval_seconds: float | None
    gpus: tuple[GpuReport, ...]
    energy_kwh: float | None
    price_per_kwh: float | None
    currency: str
    cost: float | None
    xid_events: tuple[XidRecord, ...]
    host_cpu_mean_percent: float | None
    plots: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """The `monitor report --json` document."""
        body = asdict(self)
        for gpu, report in zip(body["gpus"], self.gpus, strict=True):
            gpu["idle_periods"] = [
                {"start_unix": p.start_unix, "end_unix": p.end_unix, "seconds": p.seconds}
                for p in report.idle_periods
            ]
        return envelope(SCHEMA_NAME, SCHEMA_VERSION, body)

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> HistoryReport:
        """A saved `monitor report --json` document (keys a newer dlrig adds are dropped);
        ValueError names the first field that does not fit."""
        body = {k: v for k, v in document.items() if k not in ("schema", "schema_version")}
        report: HistoryReport = from_plain(cls, body, "monitor report", strict=False)
        return report


def _since(since_unix: float | None, joiner: str) -> tuple[str, tuple[Any, ...]]:
    """The SQL condition (after WHERE or AND) and its arguments for `--last-hours`."""
    return ("", ()) if since_unix is None else (f" {joiner} ts >= ?", (since_unix,))


def sample_weights(times: list[float], cap: float) -> list[float]:
    """Seconds each sample stands for: the time to the next one; one usual interval (cap / 3)
    for the last sample and for one followed by a gap in the recording."""
    usual = cap / 3.0
    weights = []
    for i, t in enumerate(times):
        gap = times[i + 1] - t if i + 1 < len(times) else None
        weights.append(gap if gap is not None and gap <= cap else usual)
    return weights


def build(
    path: str | Path,
    idle_below_percent: float = 5.0,
    idle_min_seconds: float = 60.0,
    price_per_kwh: float | None = None,
    currency: str = "USD",
    since_unix: float | None = None,
) -> HistoryReport:
    if price_per_kwh is not None and price_per_kwh < 0:
        raise InputError(f"--price-per-kwh {price_per_kwh} is negative", fix="give a price >= 0")
    conn = open_history(path)
    try:
        where, args = _since(since_unix, "WHERE")
        rows = history_rows.gpu_rows(conn, since_unix)
        identities = history_rows.gpu_identities(conn)
        xids = conn.execute(
            f"SELECT ts, gpu, pci_bus_id, code, count FROM xid_events{where} ORDER BY ts", args
        ).fetchall()
        host = history_rows.host_cpu_mean(conn, since_unix)
    finally:
        conn.close()
    by_gpu: dict[int, list[GpuRow]] = {}
    for row in rows:
        by_gpu.setdefault(int(row.gpu), []).append(row)
    all_times = sorted({float(r.ts) for r in rows})
    gaps = [b - a for a, b in itertools.pairwise(all_times) if b > a]
    interval = statistics.median(gaps) if gaps else None
    cap = 3.0 * interval if interval else 1.0
    reports = []
    for gpu, gpu_rows in sorted(by_gpu.items()):
        known = identities.get(gpu)
        name, uuid = (known.name, known.uuid) if known else (None, None)
        reports.append(
            _gpu_report(gpu, name, uuid, gpu_rows, cap, idle_below_percent, idle_min_seconds)
        )
    energies = [r.energy_kwh for r in reports if r.energy_kwh is not None]
    energy = sum(energies) if energies else None
    return HistoryReport(
        path=str(path),
        from_unix=all_times[0] if all_times else None,
        to_unix=all_times[-1] if all_times else None,
        interval_seconds=interval,
        gpus=tuple(reports),
        energy_kwh=energy,
        price_per_kwh=price_per_kwh,
        currency=currency,
        cost=None if energy is None or price_per_kwh is None else energy * price_per_kwh,
        xid_events=tuple(XidRecord(*x) for x in xids),
        host_cpu_mean_percent=host,
    )


def _gpu_report(
    gpu: int,
    name: str | None,
    uuid: str | None,
    rows: list[GpuRow],
    cap: float,
    idle_below: float,
    idle_min: float,
) -> GpuReport:
    times = [float(r.ts) for r in rows]
    weights = sample_weights(times, cap)
    total = sum(weights)
    unavailable = sum(w for r, w in zip(rows, weights, strict=True) if r.status != "ok")
    util = [
        (float(r.utilization), w)
        for r, w in zip(rows, weights, strict=True)
        if r.utilization is not None
    ]
    util_time = sum(w for _, w in util)
    distribution = {}
    for low, high in BUCKETS:
        label = f"{low}-{min(high, 100)}%"
        share = sum(w for u, w in util if low <= u < high)
        distribution[label] = share / util_time if util_time else 0.0
    # Idle periods: consecutive readable samples below the threshold, long enough to matter.
    periods: list[IdlePeriod] = []
    start: float | None = None
    end: float | None = None
    for i, (r, w) in enumerate(zip(rows, weights, strict=True)):
        idle = r.status == "ok" and r.utilization is not None and float(r.utilization) < idle_below
        # A gap in the recording (recorder stopped) ends a period: nobody saw what happened.
        after_gap = i > 0 and float(r.ts) - float(rows[i - 1].ts) > cap
        if after_gap and start is not None and end is not None:
            if end - start >= idle_min:
                periods.append(IdlePeriod(start, end))
            start = end = None
        if idle:
            start = float(r.ts) if start is None else start
            end = float(r.ts) + w
        elif start is not None and end is not None:
            if end - start >= idle_min:
                periods.append(IdlePeriod(start, end))
            start = end = None
    if start is not None and end is not None and end - start >= idle_min:
        periods.append(IdlePeriod(start, end))
    by_reason = {reason: 0.0 for reason in SLOWDOWN_REASONS}
    bits = {name: bit for bit, name in CLOCK_EVENT_BITS}
    throttled = 0.0
    for r, w in zip(rows, weights, strict=True):
        mask = r.clocks_event_mask
        if mask is None:
            continue
        hit = False
        for reason in SLOWDOWN_REASONS:
            if int(mask) & bits[reason]:
                by_reason[reason] += w
                hit = True
        throttled += w if hit else 0.0
    sm = [
        (float(r.sm_activity), w)
        for r, w in zip(rows, weights, strict=True)
        if r.sm_activity is not None
    ]
    power = [
        (float(r.power_watts), w)
        for r, w in zip(rows, weights, strict=True)
        if r.power_watts is not None
    ]
    # ts, power_watts and energy_joules are REAL columns: SQLite gives floats or None already.
    energy_kwh, method = energy(
        [(r.ts, r.power_watts, r.energy_joules) for r in rows], weights, cap
    )
    memory = [int(r.memory_used_bytes) for r in rows if r.memory_used_bytes is not None]
    temps = [float(r.temperature_c) for r in rows if r.temperature_c is not None]
    return GpuReport(
        gpu=gpu,
        name=name,
        uuid=uuid,
        samples=len(rows),
        seconds=total,
        unavailable_seconds=unavailable,
        utilization_mean_percent=_weighted_mean(util),
        utilization_median_percent=statistics.median([u for u, _ in util]) if util else None,
        utilization_distribution=distribution,
        sm_activity_mean_percent=_weighted_mean(sm),
        idle_seconds=sum(p.seconds for p in periods),
        idle_periods=tuple(periods),
        throttled_seconds=throttled,
        throttled_seconds_by_reason={k: v for k, v in by_reason.items() if v > 0},
        memory_used_max_bytes=max(memory) if memory else None,
        temperature_max_c=max(temps) if temps else None,
        power_mean_watts=_weighted_mean(power),
        energy_kwh=energy_kwh,
        energy_method=method,
    )


def _weighted_mean(pairs: list[tuple[float, float]]) -> float | None:
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else None


def energy(
    samples: Sequence[tuple[float, float | None, float | None]],
    weights: Sequence[float],
    cap: float,
) -> tuple[float | None, EnergyMethod | None]:
    """kWh, and how they were found, from one GPU's (time, power W, energy counter J) samples.

    Between consecutive samples that both have the counter, its increase; else power × the
    sample's weight (sample_weights). A gap in the recording (longer than `cap`) counts for
    nothing either way. The last sample stands for one usual interval after it, which no counter
    reading closes, so it counts power × weight and the kWh cover the same seconds the report
    does; that tail does not change the method named. `monitor report` and `plan` use this."""
    joules = 0.0
    used_counter = used_power = False
    last = len(samples) - 1
    for i, ((t, watts, counter), w) in enumerate(zip(samples, weights, strict=True)):
        following = samples[i + 1] if i < last else None
        if (
            following is not None
            and counter is not None
            and following[2] is not None
            and following[0] - t <= cap
        ):
            # The counter restarts from 0 when the driver reloads: count increases only.
            joules += max(following[2] - counter, 0.0)
            used_counter = True
        elif watts is not None:
            joules += watts * w
            used_power = used_power or following is not None or not used_counter
    if not used_counter and not used_power:
        return None, None
    method: EnergyMethod = "counter" if used_counter and not used_power else "integrated power"
    if used_counter and used_power:
        method = "counter and integrated power"
    return joules / 3.6e6, method


def write_plots(
    path: str | Path, out_dir: str | Path, since_unix: float | None = None
) -> list[str]:
    """PNG plots of utilisation, power, temperature and memory per GPU; the files written."""
    plt = pyplot("monitor", "history plots")
    mdates = require("matplotlib.dates", "monitor", "history plots", package="matplotlib")
    from datetime import UTC, datetime

    out = ensure_directory(out_dir)
    conn = open_history(path)
    try:
        where, args = _since(since_unix, "AND")
        rows = conn.execute(
            "SELECT gpu, ts, utilization, power_watts, temperature_c, memory_used_bytes "
            f"FROM gpu_samples WHERE status = 'ok'{where} ORDER BY gpu, ts",
            args,
        ).fetchall()
    finally:
        conn.close()
    series: dict[int, list[tuple[Any, ...]]] = {}
    for row in rows:
        series.setdefault(int(row[0]), []).append(row)
    written = []
    for column, title, unit, filename, scale in (
        (2, "GPU utilisation", "%", "utilization.png", 1.0),
        (3, "Power draw", "W", "power.png", 1.0),
        (4, "GPU temperature", "°C", "temperature.png", 1.0),
        (5, "Memory used", "GiB", "memory.png", 1 / 2**30),
    ):
        figure, axes = plt.subplots(figsize=(10, 4), dpi=100)
        for gpu, gpu_rows in sorted(series.items()):
            points = [
                (datetime.fromtimestamp(r[1], UTC), r[column] * scale)
                for r in gpu_rows
                if r[column] is not None
            ]
            if points:
                xs, ys = zip(*points, strict=True)
                axes.plot(xs, ys, label=f"GPU {gpu}", linewidth=1)
        axes.set_title(title)
        axes.set_ylabel(unit)
        axes.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        axes.grid(alpha=0.3)
        if series:
            axes.legend(loc="upper right", fontsize="small")
        figure.autofmt_xdate()
        target = out / filename
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png")
        plt.close(figure)
        write_bytes_atomic(target, buffer.getvalue())
        written.append(str(target))
    return written

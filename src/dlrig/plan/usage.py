"""What a recorded history says about a server's use: busy and idle time, power, energy.

It reads `dlrig monitor record --db` files through the monitor's public reader
(`dlrig.monitor.history.open_history`). Each sample stands for the time until the next one,
capped at three median intervals, so a gap while the recorder was stopped counts as neither
busy nor idle. The period is the calendar month (UTC) of the last sample, or the one asked for.
"""

from __future__ import annotations

import calendar
import itertools
import statistics
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from dlrig.errors import InputError
from dlrig.knowledge.gpus import catalogue
from dlrig.monitor import history_rows
from dlrig.monitor.history import open_history
from dlrig.monitor.history_rows import GpuRow
from dlrig.monitor.report import energy, sample_weights

IDLE_BELOW_PERCENT = 5.0  # as `dlrig monitor report` counts idle


@dataclass(frozen=True)
class GpuUsage:
    index: int
    name: str | None
    catalogue_id: str | None
    seconds: float
    busy_seconds: float
    utilization_mean_percent: float | None
    busy_power_watts: float | None
    idle_power_watts: float | None
    energy_kwh: float
    memory_used_max_bytes: int | None
    memory_total_bytes: int | None


@dataclass(frozen=True)
class Usage:
    path: str
    month: str
    from_unix: float
    to_unix: float
    seconds: float
    gpus: tuple[GpuUsage, ...]
    idle_periods: tuple[tuple[float, float], ...]  # every GPU idle at once
    host_cpu_mean_percent: float | None

    @property
    def gpu_energy_kwh(self) -> float:
        return sum(g.energy_kwh for g in self.gpus)

    @property
    def utilization_mean_percent(self) -> float | None:
        values = [
            g.utilization_mean_percent for g in self.gpus if g.utilization_mean_percent is not None
        ]
        return sum(values) / len(values) if values else None

    @property
    def busy_fraction(self) -> float:
        total = sum(g.seconds for g in self.gpus)
        return sum(g.busy_seconds for g in self.gpus) / total if total else 0.0

    @property
    def idle_power_watts(self) -> float:
        return sum(g.idle_power_watts or 0.0 for g in self.gpus)


def month_bounds(month: str | None, last_unix: float) -> tuple[str, float, float]:
    if month is None:
        moment = datetime.fromtimestamp(last_unix, UTC)
        year, number = moment.year, moment.month
    else:
        try:
            year, number = (int(p) for p in month.split("-"))
            if not 1 <= number <= 12:
                raise ValueError
        except ValueError:
            raise InputError(
                f"--month {month!r} is not YYYY-MM", fix="e.g. --month 2026-03"
            ) from None
    start = datetime(year, number, 1, tzinfo=UTC).timestamp()
    days = calendar.monthrange(year, number)[1]
    return f"{year:04d}-{number:02d}", start, start + days * 86400.0


def read(path: str | Path, month: str | None = None) -> Usage:
    conn = open_history(path)
    try:
        last = conn.execute("SELECT MAX(ts) FROM gpu_samples").fetchone()[0]
        if last is None:
            raise InputError(
                f"{path}: the history has no GPU samples",
                fix="record some with `dlrig monitor record --db`",
            )
        label, start, end = month_bounds(month, float(last))
        rows = history_rows.gpu_rows(conn, start, end)
        identities = history_rows.gpu_identities(conn)
        host = history_rows.host_cpu_mean(conn, start, end)
    finally:
        conn.close()
    if not rows:
        raise InputError(
            f"{path}: no samples in {label}",
            fix="pick a month the history covers with --month YYYY-MM",
        )
    times = sorted({float(r.ts) for r in rows})
    gaps = [b - a for a, b in itertools.pairwise(times) if b > a]
    cap = 3.0 * (statistics.median(gaps) if gaps else 1.0)
    by_gpu: dict[int, list[GpuRow]] = {}
    for row in rows:
        by_gpu.setdefault(int(row.gpu), []).append(row)
    gpus = []
    idle_at: dict[float, bool] = {t: True for t in times}
    for index, gpu_rows in sorted(by_gpu.items()):
        known = identities.get(index)
        name, memory_total = (known.name, known.memory_total_bytes) if known else (None, None)
        spec = catalogue().resolve(str(name)) if name else None
        gpus.append(
            _gpu(index, name, spec.id if spec else None, memory_total, gpu_rows, cap, idle_at)
        )
    return Usage(
        path=str(path),
        month=label,
        from_unix=times[0],
        to_unix=times[-1] + cap / 3.0,
        seconds=sum(sample_weights(times, cap)),
        gpus=tuple(gpus),
        idle_periods=_periods(times, cap, idle_at),
        host_cpu_mean_percent=host,
    )


def _gpu(
    index: int,
    name: str | None,
    catalogue_id: str | None,
    memory_total: int | None,
    rows: list[GpuRow],
    cap: float,
    idle_at: dict[float, bool],
) -> GpuUsage:
    times = [r.ts for r in rows]
    weights = sample_weights(times, cap)
    busy = busy_power = idle_power = busy_time = idle_time = util_sum = util_time = 0.0
    for row, w in zip(rows, weights, strict=True):
        ok = row.status == "ok" and row.utilization is not None
        is_idle = ok and row.utilization is not None and row.utilization < IDLE_BELOW_PERCENT
        if not is_idle:
            idle_at[row.ts] = False
        if ok and row.utilization is not None:
            util_sum += row.utilization * w
            util_time += w
            busy += 0.0 if is_idle else w
        if row.power_watts is not None:
            if is_idle:
                idle_power += row.power_watts * w
                idle_time += w
            else:
                busy_power += row.power_watts * w
                busy_time += w
    kwh, _ = energy([(r.ts, r.power_watts, r.energy_joules) for r in rows], weights, cap)
    memory = [r.memory_used_bytes for r in rows if r.memory_used_bytes is not None]
    return GpuUsage(
        index=index,
        name=name,
        catalogue_id=catalogue_id,
        seconds=sum(weights),
        busy_seconds=busy,
        utilization_mean_percent=util_sum / util_time if util_time else None,
        busy_power_watts=busy_power / busy_time if busy_time else None,
        idle_power_watts=idle_power / idle_time if idle_time else None,
        energy_kwh=kwh or 0.0,
        memory_used_max_bytes=max(memory) if memory else None,
        memory_total_bytes=int(memory_total) if memory_total is not None else None,
    )


def _periods(
    times: list[float], cap: float, idle_at: dict[float, bool]
) -> tuple[tuple[float, float], ...]:
    """Stretches where every GPU was idle at once (the whole server could sleep)."""
    periods: list[tuple[float, float]] = []
    start = end = None
    for i, t in enumerate(times):
        after_gap = i > 0 and t - times[i - 1] > cap
        if after_gap and start is not None and end is not None:
            periods.append((start, end))
            start = end = None
        if idle_at[t]:
            start = t if start is None else start
            end = t + (
                times[i + 1] - t if i + 1 < len(times) and times[i + 1] - t <= cap else cap / 3.0
            )
        elif start is not None and end is not None:
            periods.append((start, end))
            start = end = None
    if start is not None and end is not None:
        periods.append((start, end))
    return tuple(periods)

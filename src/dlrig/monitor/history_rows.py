"""Typed rows of a `dlrig monitor record` history: the one reader `monitor report`,
`plan cost`, `plan upgrade --history` and `dlrig report` share (each used to have its own
SELECT)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class GpuRow:
    """One GPU sample: `utilization` and `sm_activity` in %, `power_watts` in W,
    `energy_joules` the driver's counter since load (J, `nvidia-smi -q -d POWER`'s energy),
    `temperature_c` in °C, `clocks_event_mask` NVML's clocks-event reasons."""

    ts: float  # Unix time of the sample
    gpu: int  # NVML's index
    status: Literal["ok", "lost", "hung", "error"]
    utilization: float | None
    sm_activity: float | None
    memory_used_bytes: int | None
    power_watts: float | None
    energy_joules: float | None
    temperature_c: float | None
    clocks_event_mask: int | None
    sm_clock_mhz: int | None


@dataclass(frozen=True)
class GpuIdentity:
    """What the history recorded of a GPU once: its name, UUID and memory size in bytes."""

    name: str | None
    uuid: str | None
    memory_total_bytes: int | None


def _between(start: float | None, end: float | None) -> tuple[str, tuple[float, ...]]:
    clauses, args = [], []
    if start is not None:
        clauses.append("ts >= ?")
        args.append(start)
    if end is not None:
        clauses.append("ts < ?")
        args.append(end)
    return (" WHERE " + " AND ".join(clauses) if clauses else ""), tuple(args)


def gpu_rows(
    conn: sqlite3.Connection, start: float | None = None, end: float | None = None
) -> list[GpuRow]:
    """The GPU samples with start <= ts < end (None: unbounded), by GPU then time."""
    where, args = _between(start, end)
    rows = conn.execute(
        "SELECT ts, gpu, status, utilization, sm_activity, memory_used_bytes, power_watts, "
        f"energy_joules, temperature_c, clocks_event_mask, sm_clock_mhz FROM gpu_samples{where} "
        "ORDER BY gpu, ts",
        args,
    ).fetchall()
    return [GpuRow(*row) for row in rows]


def gpu_identities(conn: sqlite3.Connection) -> dict[int, GpuIdentity]:
    """Each recorded GPU's identity, by NVML index."""
    return {
        int(row[0]): GpuIdentity(row[1], row[2], row[3])
        for row in conn.execute("SELECT gpu, name, uuid, memory_total_bytes FROM gpus")
    }


def host_cpu_mean(
    conn: sqlite3.Connection, start: float | None = None, end: float | None = None
) -> float | None:
    """The mean host CPU use in % over start <= ts < end, None without host samples."""
    where, args = _between(start, end)
    row = conn.execute(f"SELECT AVG(cpu_percent) FROM host_samples{where}", args).fetchone()
    return None if row is None or row[0] is None else float(row[0])

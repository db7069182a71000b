"""Sample history in SQLite: one row per GPU per sample, one per host sample, Xid events.

The database runs in WAL mode with one transaction per sample, so a `kill -9` (or power cut
between checkpoints) loses at most the sample being written, never the file: SQLite's journal
makes every committed sample durable against a process crash and the file always opens. The
history is bounded by age and by size; trimming deletes the oldest samples and hands the freed
pages back with incremental vacuum.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlrig.errors import InputError
from dlrig.machine.nvml import clock_event_mask
from dlrig.monitor.sample import Sample

SCHEMA_VERSION = 1
SQLITE_MAGIC = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS gpus (
    gpu INTEGER PRIMARY KEY,
    uuid TEXT, name TEXT, pci_bus_id TEXT,
    memory_total_bytes INTEGER, power_default_limit_watts REAL, sm_clock_max_mhz INTEGER
);
CREATE TABLE IF NOT EXISTS gpu_samples (
    ts REAL NOT NULL,
    gpu INTEGER NOT NULL,
    status TEXT NOT NULL,
    utilization REAL, memory_utilization REAL, sm_activity REAL,
    memory_used_bytes INTEGER,
    power_watts REAL, power_limit_watts REAL, energy_joules REAL,
    temperature_c REAL, memory_temperature_c REAL,
    sm_clock_mhz INTEGER, memory_clock_mhz INTEGER, fan_percent REAL, pstate TEXT,
    clocks_event_mask INTEGER,
    pcie_gen INTEGER, pcie_width INTEGER, pcie_tx_bps REAL, pcie_rx_bps REAL,
    ecc_corrected INTEGER, ecc_uncorrected INTEGER,
    processes INTEGER,
    PRIMARY KEY (ts, gpu)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS host_samples (
    ts REAL PRIMARY KEY,
    cpu_percent REAL, cpu_max_core_percent REAL, iowait_percent REAL,
    memory_used_bytes INTEGER, memory_total_bytes INTEGER, shm_used_bytes INTEGER,
    disk_read_bytes INTEGER, disk_write_bytes INTEGER,
    net_rx_bytes INTEGER, net_tx_bytes INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS xid_events (
    ts REAL NOT NULL, gpu INTEGER, pci_bus_id TEXT, code INTEGER NOT NULL, count INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS gpu_samples_by_gpu ON gpu_samples (gpu, ts);
"""

_GPU_COLUMNS = (
    "ts, gpu, status, utilization, memory_utilization, sm_activity, memory_used_bytes, "
    "power_watts, power_limit_watts, energy_joules, temperature_c, memory_temperature_c, "
    "sm_clock_mhz, memory_clock_mhz, fan_percent, pstate, clocks_event_mask, pcie_gen, "
    "pcie_width, pcie_tx_bps, pcie_rx_bps, ecc_corrected, ecc_uncorrected, processes"
)


@dataclass(frozen=True)
class Retention:
    max_age_seconds: float | None = 30 * 86400.0
    max_bytes: int | None = 1024**3
    check_every_samples: int = 60


def _connect(path: Path, create: bool) -> sqlite3.Connection:
    if not create and not path.exists():
        raise InputError(f"{path}: no such history database", fix="record one first")
    try:
        # Opened in the command's thread, written from the sampler's: one writer at a time.
        conn = sqlite3.connect(
            str(path), timeout=10.0, isolation_level=None, check_same_thread=False
        )
        conn.execute("PRAGMA busy_timeout = 10000")
        if create:
            # auto_vacuum must be chosen before the first table exists.
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise InputError(
                f"{path}: SQLite cannot use WAL mode here (got {mode})",
                fix="put the history on a local filesystem (not NFS)",
            )
        # NORMAL in WAL mode: committed samples survive a process crash; an OS crash may lose
        # the last ones, never the database.
        conn.execute("PRAGMA synchronous = NORMAL")
    except sqlite3.DatabaseError as exc:
        raise InputError(
            f"{path}: not a usable SQLite database ({exc})",
            fix="give the file `dlrig monitor record --db` wrote, or a new path",
        ) from None
    return conn


class HistoryWriter:
    """Appends samples; use as the sampler's listener."""

    def __init__(
        self, path: str | Path, retention: Retention | None = None, source: str = ""
    ) -> None:
        self.path = Path(path)
        if self.path.exists() and self.path.is_dir():
            raise InputError(f"{self.path}: is a directory", fix="give a file path for --db")
        if not self.path.parent.exists():
            raise InputError(
                f"{self.path.parent}: no such directory", fix="create it or pick another --db"
            )
        self.retention = retention or Retention()
        self._conn = _connect(self.path, create=True)
        try:
            self._conn.executescript(_SCHEMA)
            existing = self._meta("schema_version")
            if existing is not None and int(existing) != SCHEMA_VERSION:
                raise InputError(
                    f"{self.path}: history schema {existing} is not {SCHEMA_VERSION}",
                    fix="record into a new file",
                )
            self._conn.execute("BEGIN")
            self._set_meta("schema_version", str(SCHEMA_VERSION))
            if self._meta("created_unix") is None:
                self._set_meta("created_unix", repr(time.time()))
            if source:
                self._set_meta("source", source)
            self._conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise InputError(
                f"{self.path}: not a dlrig history database ({exc})",
                fix="record into a new file",
            ) from None
        self._samples = 0
        self._seen_gpus: dict[int, tuple[Any, ...]] = {}
        self._xid_counts: dict[tuple[int | None, str | None, int], int] = {}

    @property
    def samples_written(self) -> int:
        return self._samples

    def _meta(self, key: str) -> str | None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, key: str, value: str) -> None:
        self._conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def __call__(self, sample: Sample) -> None:
        self.write(sample)

    def write(self, sample: Sample) -> None:
        ts = sample.timestamp_unix
        rows: list[tuple[Any, ...]] = []
        gpu_rows = []
        for reading in sample.gpus:
            g = reading.gpu
            if g is not None:
                identity = (
                    reading.index,
                    g.uuid,
                    g.name,
                    g.pci_bus_id,
                    g.memory_total_bytes,
                    g.power_default_limit_watts,
                    g.sm_clock_max_mhz,
                )
                if self._seen_gpus.get(reading.index) != identity:
                    gpu_rows.append(identity)
            if not reading.up or g is None:
                rows.append((ts, reading.index, reading.status) + (None,) * 21)
                continue
            rows.append(
                (
                    ts,
                    reading.index,
                    "ok",
                    g.utilization_gpu_percent,
                    g.utilization_memory_percent,
                    g.sm_activity_percent,
                    g.memory_used_bytes,
                    g.power_draw_watts,
                    g.power_limit_watts,
                    g.energy_consumed_joules,
                    g.temperature_c,
                    g.memory_temperature_c,
                    g.sm_clock_mhz,
                    g.memory_clock_mhz,
                    g.fan_speed_percent,
                    g.performance_state,
                    None
                    if g.clocks_event_reasons is None
                    else clock_event_mask(g.clocks_event_reasons),
                    g.pcie.gen_current,
                    g.pcie.width_current,
                    g.pcie_tx_bytes_per_second,
                    g.pcie_rx_bytes_per_second,
                    g.ecc_errors.volatile_corrected,
                    g.ecc_errors.volatile_uncorrected,
                    None if g.processes is None else len(g.processes),
                )
            )
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            if gpu_rows:
                conn.executemany(
                    "INSERT OR REPLACE INTO gpus VALUES (?, ?, ?, ?, ?, ?, ?)", gpu_rows
                )
            conn.executemany(
                f"INSERT OR REPLACE INTO gpu_samples ({_GPU_COLUMNS}) VALUES "
                f"({', '.join('?' * 24)})",
                rows,
            )
            h = sample.host
            if h is not None:
                conn.execute(
                    "INSERT OR REPLACE INTO host_samples VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        ts,
                        h.cpu_percent,
                        max(h.cpu_percent_per_core, default=None),
                        h.cpu_iowait_percent,
                        h.memory_used_bytes,
                        h.memory_total_bytes,
                        h.shm_used_bytes,
                        h.disk_read_bytes_total,
                        h.disk_write_bytes_total,
                        h.network_receive_bytes_total,
                        h.network_transmit_bytes_total,
                    ),
                )
            counted = {}
            for xid in sample.xids:
                key = (xid.gpu_index, xid.pci_bus_id, xid.code)
                new = xid.count - self._xid_counts.get(key, 0)
                if new > 0:
                    conn.execute(
                        "INSERT INTO xid_events VALUES (?, ?, ?, ?, ?)",
                        (xid.last_seen_unix, xid.gpu_index, xid.pci_bus_id, xid.code, new),
                    )
                    counted[key] = xid.count
            conn.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled back already (disk full): keep its error, not ours.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        # Only what was committed is remembered as written.
        self._xid_counts.update(counted)
        for row in gpu_rows:
            self._seen_gpus[row[0]] = row
        self._samples += 1
        if self._samples % self.retention.check_every_samples == 0:
            self.trim(now=ts)

    def trim(self, now: float | None = None) -> int:
        """Apply the retention bounds; the number of sample rows deleted."""
        conn = self._conn
        deleted = 0
        now = time.time() if now is None else now
        if self.retention.max_age_seconds is not None:
            cutoff = now - self.retention.max_age_seconds
            deleted += self._delete_before(cutoff)
        if self.retention.max_bytes is not None:
            for _ in range(20):  # each pass drops ~10% of the oldest samples
                if self.size_bytes() <= self.retention.max_bytes:
                    break
                oldest, newest = conn.execute("SELECT MIN(ts), MAX(ts) FROM gpu_samples").fetchone()
                if oldest is None or oldest == newest:
                    break
                deleted += self._delete_before(oldest + (newest - oldest) * 0.1)
                conn.execute("PRAGMA incremental_vacuum")
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return deleted

    def _delete_before(self, cutoff: float) -> int:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        cursor = conn.execute("DELETE FROM gpu_samples WHERE ts < ?", (cutoff,))
        conn.execute("DELETE FROM host_samples WHERE ts < ?", (cutoff,))
        conn.execute("DELETE FROM xid_events WHERE ts < ?", (cutoff,))
        conn.execute("COMMIT")
        return int(cursor.rowcount)

    def size_bytes(self) -> int:
        page_count = self._conn.execute("PRAGMA page_count").fetchone()[0]
        free = self._conn.execute("PRAGMA freelist_count").fetchone()[0]
        page_size = self._conn.execute("PRAGMA page_size").fetchone()[0]
        return int((page_count - free) * page_size)

    def close(self) -> None:
        try:
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            self._conn.close()


def open_history(path: str | Path) -> sqlite3.Connection:
    """A connection for reading a history database (InputError when it is not one)."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path}: is a directory", fix="give the history database file")
    # Look before SQLite opens it: connecting to an empty or foreign file writes a database
    # header into it, and a file the user gave is never changed.
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        raise InputError(f"{path}: no such history database", fix="record one first") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot be read ({exc.strerror})", fix="check the file") from None
    if head != SQLITE_MAGIC:
        raise InputError(
            f"{path}: not a dlrig history database" + (" (the file is empty)" if not head else ""),
            fix="give a file from `monitor record --db`",
        )
    conn = _connect(path, create=False)
    try:
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    except sqlite3.DatabaseError:
        conn.close()
        raise InputError(
            f"{path}: not a dlrig history database", fix="give a file from `monitor record --db`"
        ) from None
    if version is None or int(version[0]) != SCHEMA_VERSION:
        conn.close()
        raise InputError(
            f"{path}: history schema {version and version[0]} is not supported",
            fix=f"this dlrig reads schema {SCHEMA_VERSION}",
        )
    return conn


class BackgroundWriter:
    """Writes samples from its own thread, so a slow disk or a trim never holds the sampler
    (and with it the exporter's page) back. Samples queue up to `backlog`; beyond that the
    newest are dropped and counted rather than piling up in memory."""

    def __init__(self, writer: HistoryWriter, backlog: int = 1000) -> None:
        import queue
        import threading

        self.writer = writer
        self.dropped = 0
        self.error: BaseException | None = None
        self._queue: queue.Queue[Sample | None] = queue.Queue(maxsize=backlog)
        self._full = queue.Full
        self._thread = threading.Thread(target=self._run, name="dlrig-history", daemon=True)
        self._thread.start()

    def __call__(self, sample: Sample) -> None:
        if self.error is not None:
            raise self.error
        try:
            self._queue.put_nowait(sample)
        except self._full:
            self.dropped += 1

    def _run(self) -> None:
        while True:
            sample = self._queue.get()
            if sample is None:
                return
            try:
                self.writer.write(sample)
            except BaseException as exc:  # noqa: BLE001 - reported to the sampler's next call
                self.error = exc
                return

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, then close the database."""
        import contextlib

        with contextlib.suppress(Exception):
            self._queue.put(None, timeout=timeout)
        self._thread.join(timeout=timeout)
        if not self._thread.is_alive():
            self.writer.close()

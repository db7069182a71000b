"""Host readings for the monitor: CPU per core, memory, /dev/shm, disk and network I/O (psutil).

`HostMeter` keeps psutil's CPU-time baseline between calls, so each reading is the CPU use since
the previous one: the same window as the GPU sample it is stored with.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class HostSample:
    cpu_percent_per_core: tuple[float, ...]
    cpu_iowait_percent: float | None
    load_average_1m: float | None
    memory_total_bytes: int
    memory_available_bytes: int
    swap_used_bytes: int
    shm_total_bytes: int | None
    shm_used_bytes: int | None
    disk_read_bytes_total: int | None  # counters since boot, all block devices
    disk_write_bytes_total: int | None
    network_receive_bytes_total: int | None  # counters since boot, physical interfaces
    network_transmit_bytes_total: int | None

    @property
    def cpu_percent(self) -> float:
        cores = self.cpu_percent_per_core
        return sum(cores) / len(cores) if cores else 0.0

    @property
    def memory_used_bytes(self) -> int:
        return self.memory_total_bytes - self.memory_available_bytes


class HostMeter:
    """Reads the host; the first reading's CPU figures cover the time since construction."""

    def __init__(self, shm_path: str = "/dev/shm") -> None:
        import psutil

        self._psutil = psutil
        self._shm_path = shm_path
        psutil.cpu_percent(percpu=True)  # sets the baseline for the next call
        psutil.cpu_times_percent()

    def read(self) -> HostSample:
        psutil = self._psutil
        per_core = tuple(float(p) for p in psutil.cpu_percent(percpu=True))
        times = psutil.cpu_times_percent()
        memory = psutil.virtual_memory()
        swap = psutil.swap_memory()
        try:
            shm = os.statvfs(self._shm_path)
            shm_total: int | None = shm.f_blocks * shm.f_frsize
            shm_used: int | None = (shm.f_blocks - shm.f_bfree) * shm.f_frsize
        except OSError:
            shm_total = shm_used = None
        try:
            disk = psutil.disk_io_counters(perdisk=False)
        except (OSError, RuntimeError):  # containers without /proc/diskstats
            disk = None
        try:
            nics = psutil.net_io_counters(pernic=True)
        except OSError:
            nics = {}
        # Physical NICs only: bridges, veths and bond members would count packets twice.
        physical = {n: c for n, c in nics.items() if os.path.exists(f"/sys/class/net/{n}/device")}
        counted = physical or {n: c for n, c in nics.items() if n != "lo"}
        rx = sum(c.bytes_recv for c in counted.values()) if counted else None
        tx = sum(c.bytes_sent for c in counted.values()) if counted else None
        try:
            load1: float | None = os.getloadavg()[0]
        except OSError:
            load1 = None
        return HostSample(
            cpu_percent_per_core=per_core,
            cpu_iowait_percent=getattr(times, "iowait", None),
            load_average_1m=load1,
            memory_total_bytes=int(memory.total),
            memory_available_bytes=int(memory.available),
            swap_used_bytes=int(swap.used),
            shm_total_bytes=shm_total,
            shm_used_bytes=shm_used,
            disk_read_bytes_total=int(disk.read_bytes) if disk else None,
            disk_write_bytes_total=int(disk.write_bytes) if disk else None,
            network_receive_bytes_total=rx,
            network_transmit_bytes_total=tx,
        )

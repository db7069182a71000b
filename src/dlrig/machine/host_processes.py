"""What the host knows of the processes on the GPUs: user, CPU %, resident memory, start time
and command line (psutil), for the monitor's process view.

NVML names a process by pid and GPU memory only. Whether the job on GPU 3 is starved by its
own data loader (CPU at 100 % of one core), whose it is and how long it has run are the host's
to say. `ProcessMeter` keeps each `psutil.Process` between readings, so CPU % is the use since
the previous reading (the sampler's interval), as top and nvitop show it.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HostProcess:
    pid: int
    user: str | None = None
    cpu_percent: float | None = None  # since the previous reading; None on the first
    rss_bytes: int | None = None
    started_unix: float | None = None
    command: str | None = None  # the command line, as ps shows it
    parent_pid: int | None = None


class ProcessMeter:
    """Reads the host's view of the given pids; gone or foreign pids are left out."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self._known: dict[int, Any] = {}

    def read(self, pids: Iterable[int]) -> tuple[HostProcess, ...]:
        psutil = self._psutil
        wanted = sorted(set(pids))
        seen: dict[int, Any] = {}
        out = []
        for pid in wanted:
            process = self._known.get(pid)
            first = process is None
            try:
                if process is None or not process.is_running():  # new, or the pid was reused
                    process = psutil.Process(pid)
                    first = True
                with process.oneshot():
                    cpu = process.cpu_percent(interval=None)  # 0.0 the first time: no baseline
                    memory = process.memory_info()
                    command = " ".join(process.cmdline()) or process.name()
                    host = HostProcess(
                        pid=pid,
                        user=_user(process),
                        cpu_percent=None if first else float(cpu),
                        rss_bytes=int(memory.rss),
                        started_unix=float(process.create_time()),
                        command=command,
                        parent_pid=process.ppid(),
                    )
            except (psutil.Error, OSError):
                continue  # exited between NVML's list and now, or another namespace's pid
            seen[pid] = process
            out.append(host)
        self._known = seen
        return tuple(out)


def _user(process: Any) -> str | None:
    try:
        return str(process.username())
    except Exception:  # noqa: BLE001 - KeyError for a uid with no passwd entry (containers)
        try:
            return str(process.uids().real)
        except Exception:  # noqa: BLE001
            return None


def send_signal(pid: int, signum: int, started_unix: float) -> str:
    """Signal `pid` if it is still the process that started at `started_unix` (a pid reused
    since the view was drawn is someone else's); what happened, in words."""
    import psutil

    try:
        process = psutil.Process(pid)
        if abs(process.create_time() - started_unix) > 1.0:
            return f"pid {pid} is another process now: nothing sent"
        process.send_signal(signum)
    except psutil.NoSuchProcess:
        return f"pid {pid} has exited"
    except psutil.AccessDenied:
        return f"pid {pid} belongs to another user: not allowed (run as its user or root)"
    return f"sent {signal.Signals(signum).name} to pid {pid}"

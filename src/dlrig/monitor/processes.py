"""The live view's process list: each GPU process with what NVML and the host know of it.

NVML gives the pid, GPU memory, the MIG instance and (from its utilisation samples) SM and
video-engine use; the host adds user, CPU %, resident memory, run time and the command line
(`dlrig.machine.host_processes`, live sources only). Sorted and filtered as `--sort` and
`--filter` say; laid out like the GPU table, numbers whole and the command cut first.
"""

from __future__ import annotations

import time
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from dlrig.machine.host_processes import HostProcess
from dlrig.machine.model import GpuProcess
from dlrig.monitor.columns import Column, lay_out, lines
from dlrig.monitor.sample import Sample

SortKey = Literal["gpu", "gpu-memory", "sm", "cpu", "rss", "time", "pid"]
SORT_KEYS: tuple[SortKey, ...] = typing.get_args(SortKey)


class Row(NamedTuple):
    """What one line of the process list shows: a pid can be on several GPUs (a line each);
    `started_unix` is from the host (None: not a process this host can see)."""

    gpu: int
    pid: int
    started_unix: float | None


@dataclass(frozen=True)
class ProcessOptions:
    sort: SortKey = "gpu"
    filter: str | None = None  # kept where user, command, name or container contains it
    tree: bool = False  # a process under its parent, where both are on a GPU


@dataclass(frozen=True)
class _Proc:
    gpu: int
    process: GpuProcess
    host: HostProcess | None
    depth: int = 0  # in the tree view: how many GPU processes above it

    @property
    def command(self) -> str:
        text = self.process.name or "?"
        if self.host is not None and self.host.command:
            text = self.host.command
        return "  " * (self.depth - 1) + "└ " + text if self.depth else text

    @property
    def container(self) -> str:
        container = (self.process.container_id or "")[:12]
        if self.process.kubernetes_pod_uid:
            container = f"pod {self.process.kubernetes_pod_uid[:8]} {container}".strip()
        return container


def gib(value: int | None) -> str:
    """Bytes as GiB with one decimal, "?" when unknown (the live view's memory figures)."""
    return "?" if value is None else f"{value / 2**30:.1f}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def elapsed(seconds: float | None) -> str:
    """Run time as ps's etime writes it: 45s, 12:34, 3:12:34, 2d03h."""
    if seconds is None:
        return "-"
    seconds = max(int(seconds), 0)
    if seconds < 60:
        return f"{seconds}s"
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours == 0:
        return f"{minutes}:{secs:02d}"
    days, hours = divmod(hours, 24)
    return f"{hours}:{minutes:02d}:{secs:02d}" if days == 0 else f"{days}d{hours:02d}h"


def _sort_key(options: ProcessOptions, now: float) -> Callable[[_Proc], tuple[Any, ...]]:
    def descending(value: float | None) -> float:
        return -(value if value is not None else -1.0)

    keys: dict[str, Callable[[_Proc], tuple[Any, ...]]] = {
        "gpu": lambda p: (p.gpu, descending(p.process.used_memory_bytes), p.process.pid),
        "gpu-memory": lambda p: (descending(p.process.used_memory_bytes), p.gpu),
        "sm": lambda p: (descending(p.process.sm_percent), p.gpu),
        "cpu": lambda p: (descending(p.host.cpu_percent if p.host else None), p.gpu),
        "rss": lambda p: (descending(p.host.rss_bytes if p.host else None), p.gpu),
        "time": lambda p: (p.host.started_unix if p.host and p.host.started_unix else now, p.gpu),
        "pid": lambda p: (p.process.pid, p.gpu),
    }
    return keys[options.sort]


def select(sample: Sample, options: ProcessOptions) -> list[_Proc]:
    """The processes of the sample, filtered and sorted."""
    hosts = {h.pid: h for h in sample.processes}
    found = [
        _Proc(reading.index, process, hosts.get(process.pid))
        for reading in sample.gpus
        if reading.up and reading.gpu is not None
        for process in reading.gpu.processes or ()
    ]
    if options.filter:
        needle = options.filter.lower()
        found = [
            p
            for p in found
            if needle
            in " ".join(
                (
                    p.command,
                    p.process.name or "",
                    p.container,
                    (p.host.user if p.host else "") or "",
                )
            ).lower()
        ]
    ordered = sorted(found, key=_sort_key(options, sample.timestamp_unix))
    return _as_tree(ordered) if options.tree else ordered


def _as_tree(procs: list[_Proc]) -> list[_Proc]:
    """Each process followed by its children (by the host's parent pid), in the sort order
    among siblings: a launcher's ranks under it. Without host facts (a replay) it is a list."""
    pids = {p.process.pid for p in procs}
    children: dict[int, list[_Proc]] = {}
    roots: list[_Proc] = []
    for p in procs:
        parent = p.host.parent_pid if p.host is not None else None
        if parent is not None and parent in pids and parent != p.process.pid:
            children.setdefault(parent, []).append(p)
        else:
            roots.append(p)
    out: list[_Proc] = []
    seen: set[int] = set()

    def visit(p: _Proc, depth: int) -> None:
        out.append(_Proc(p.gpu, p.process, p.host, depth))
        if p.process.pid in seen:  # the same pid on two GPUs: its children once
            return
        seen.add(p.process.pid)
        for child in children.get(p.process.pid, ()):
            visit(child, depth + 1)

    for root in roots:
        visit(root, 0)
    return out


def process_lines(sample: Sample, width: int, options: ProcessOptions | None = None) -> list[str]:
    """The header and one line per process, for `width` columns; [] when there are none."""
    return process_table(sample, width, options)[0]


def process_table(
    sample: Sample, width: int, options: ProcessOptions | None = None
) -> tuple[list[str], list[Row]]:
    """`process_lines` and, for each line after the header, the process it shows (for
    selecting one in the interactive view)."""
    options = options or ProcessOptions()
    procs = select(sample, options)
    pids = [
        Row(p.gpu, p.process.pid, p.host.started_unix if p.host is not None else None)
        for p in procs
    ]
    if not procs:
        if options.filter and any(r.gpu and r.gpu.processes for r in sample.gpus):
            return [f"no GPU process matches --filter {options.filter!r}"], []
        return [], []
    now = sample.timestamp_unix or time.time()
    host = any(p.host is not None for p in procs)

    def cells(pick: Callable[[_Proc], str]) -> list[str]:
        return [pick(p) for p in procs]

    columns = [
        Column("GPU", cells(lambda p: str(p.gpu)), right=True),
        Column("PID", cells(lambda p: str(p.process.pid)), right=True),
        Column("GPU GiB", cells(lambda p: gib(p.process.used_memory_bytes)), right=True),
        Column("SM%", cells(lambda p: _percent(p.process.sm_percent)), right=True, rank=1),
        Column("command", cells(lambda p: p.command), rank=1, least=7, cut=True),
    ]
    if any(p.process.gpu_instance_id is not None for p in procs):
        columns.insert(
            1,
            Column(
                "GI/CI",
                cells(
                    lambda p: (
                        f"{p.process.gpu_instance_id}/{p.process.compute_instance_id}"
                        if p.process.gpu_instance_id is not None
                        else "-"
                    )
                ),
                right=True,
            ),
        )
    if any(
        p.process.encoder_percent is not None or p.process.decoder_percent is not None
        for p in procs
    ):
        columns.insert(
            -1,
            Column(
                "enc/dec%",
                cells(
                    lambda p: (
                        f"{_percent(p.process.encoder_percent)}/{_percent(p.process.decoder_percent)}"
                    )
                ),
                right=True,
                rank=2,
            ),
        )
    if host:
        columns[-1:-1] = [
            Column(
                "user",
                cells(lambda p: (p.host.user if p.host else None) or "-"),
                rank=3,
                least=4,
                cut=True,
            ),
            Column(
                "CPU%",
                cells(lambda p: _percent(p.host.cpu_percent if p.host else None)),
                right=True,
                rank=1,
            ),
            Column(
                "RSS GiB",
                cells(lambda p: gib(p.host.rss_bytes) if p.host else "-"),
                right=True,
                rank=2,
            ),
            Column(
                "time",
                cells(
                    lambda p: (
                        elapsed(now - p.host.started_unix)
                        if p.host and p.host.started_unix
                        else "-"
                    )
                ),
                right=True,
                rank=3,
            ),
        ]
    if any(p.container for p in procs):
        columns.insert(
            -1, Column("container", cells(lambda p: p.container or "-"), rank=4, least=9, cut=True)
        )
    layout = lay_out(columns, width)
    if layout is None:
        blocks = [
            f"GPU {p.gpu} pid {p.process.pid} {gib(p.process.used_memory_bytes)} GiB {p.command}"
            for p in procs
        ]
        return ["GPU processes", *blocks], pids
    return lines(layout), pids

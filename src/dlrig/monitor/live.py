"""The live terminal view: per-GPU bars and sparklines, MIG instances, processes, a host row,
the reading; where no GPU can be read, the reason in place of the GPU table."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dlrig.machine.model import Gpu, MigDevice
from dlrig.monitor.reading import Reading, read_situation
from dlrig.monitor.sample import Sample

_SPARK = "▁▂▃▄▅▆▇█"
_SEVERITY_STYLE = {"critical": "bold red", "warn": "yellow", "info": "green"}


def sparkline(values: Sequence[float | None], width: int = 30, top: float = 100.0) -> str:
    """The last `width` values as block characters; gaps (None) as spaces."""
    tail = list(values)[-width:]
    out = []
    for value in tail:
        if value is None:
            out.append(" ")
            continue
        level = min(max(value / top, 0.0), 1.0)
        out.append(_SPARK[min(int(level * (len(_SPARK) - 1) + 0.5), len(_SPARK) - 1)])
    return "".join(out).rjust(width)


def bar(fraction: float | None, width: int = 12) -> str:
    if fraction is None:
        return "n/a".center(width)
    fraction = min(max(fraction, 0.0), 1.0)
    filled = round(fraction * width)
    return "█" * filled + "░" * (width - filled)


def _gib(value: int | None) -> str:
    return "?" if value is None else f"{value / 2**30:.1f}"


def _rate(previous: Sample | None, sample: Sample, attribute: str) -> float | None:
    if previous is None or previous.host is None or sample.host is None:
        return None
    before: int | None = getattr(previous.host, attribute)
    after: int | None = getattr(sample.host, attribute)
    elapsed = sample.timestamp_unix - previous.timestamp_unix
    if before is None or after is None or elapsed <= 0:
        return None
    return max(after - before, 0) / elapsed


def _mb(rate: float | None) -> str:
    return "?" if rate is None else f"{rate / 1e6:.0f} MB/s"


def _mig_row(mig: MigDevice) -> tuple[str, ...]:
    """One MIG instance under its GPU: memory is per instance, utilisation is not reported."""
    memory = (
        mig.memory_used_bytes / mig.memory_total_bytes
        if mig.memory_used_bytes is not None and mig.memory_total_bytes
        else None
    )
    name = f"  └ MIG {mig.index}" + (f" {mig.profile}" if mig.profile else "")
    instance = "" if mig.gpu_instance_id is None else f"GI {mig.gpu_instance_id}"
    return (
        name,
        "n/a under MIG".center(17),
        instance,
        f"{bar(memory, 8)} {_gib(mig.memory_used_bytes)}/{_gib(mig.memory_total_bytes)} GiB",
        "",
        "",
        "" if mig.sm_count is None else f"{mig.sm_count} SMs",
        "",
    )


def render(samples: Sequence[Sample], title: str = "dlrig monitor", note: str | None = None) -> Any:
    """A rich renderable of the last sample, with sparklines from the earlier ones; `note`
    says why there are no GPU readings (no NVML, no nvidia-smi)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if not samples:
        return Text("waiting for the first sample…")
    sample = samples[-1]
    previous = samples[-2] if len(samples) > 1 else None
    parts: list[Any] = []
    if not sample.gpus:
        parts.append(Text(f"{title}: {note or 'the source has no GPUs'}", style="yellow"))
    gpus = Table(title=title, expand=True, title_justify="left")
    gpus.add_column("GPU", no_wrap=True, min_width=8)
    for column in ("util", "trend", "memory", "power", "temp", "clocks", "PCIe"):
        gpus.add_column(column, no_wrap=True)
    for reading in sample.gpus:
        g = reading.gpu
        name = f"{reading.index} {g.name.removeprefix('NVIDIA ') if g else '?'}"
        if not reading.up or g is None:
            gpus.add_row(
                name,
                Text(reading.status.upper(), style="bold red"),
                reading.error or "",
                "",
                "",
                "",
                "",
                "",
            )
            continue
        history = [_util_of(s, reading.index) for s in samples]
        util = g.utilization_gpu_percent
        memory = (
            g.memory_used_bytes / g.memory_total_bytes
            if g.memory_used_bytes is not None and g.memory_total_bytes
            else None
        )
        reasons = [r for r in g.clocks_event_reasons or () if r != "gpu_idle"]
        gpus.add_row(
            name,
            f"{bar(None if util is None else util / 100)} {'' if util is None else f'{util:3.0f}%'}",
            sparkline(history, width=20),
            f"{bar(memory, 8)} {_gib(g.memory_used_bytes)}/{_gib(g.memory_total_bytes)} GiB",
            (f"{g.power_draw_watts:.0f}" if g.power_draw_watts is not None else "?")
            + (f"/{g.power_limit_watts:.0f} W" if g.power_limit_watts else " W"),
            (f"{g.temperature_c:.0f}°C" if g.temperature_c is not None else "?")
            + (f" {','.join(reasons)}" if reasons else ""),
            f"{g.sm_clock_mhz or '?'}/{g.sm_clock_max_mhz or '?'} MHz",
            f"Gen{g.pcie.gen_current or '?'} x{g.pcie.width_current or '?'}",
        )
        for mig in g.mig_devices:
            gpus.add_row(*_mig_row(mig))
    if sample.gpus:
        parts.append(gpus)
    processes = _process_rows(sample)
    if processes:
        table = Table(expand=True)
        for column in ("GPU", "PID", "process", "container", "GPU memory"):
            table.add_column(column, no_wrap=True)
        for row in processes:
            table.add_row(*row)
        parts.append(table)
    if sample.host is not None:
        h = sample.host
        busiest = max(h.cpu_percent_per_core, default=0.0)
        parts.append(
            Text(
                f"host  CPU {bar(h.cpu_percent / 100, 10)} {h.cpu_percent:3.0f}% "
                f"(busiest core {busiest:.0f}%, {len(h.cpu_percent_per_core)} cores)   "
                f"RAM {_gib(h.memory_used_bytes)}/{_gib(h.memory_total_bytes)} GiB   "
                f"/dev/shm {_gib(h.shm_used_bytes)}/{_gib(h.shm_total_bytes)} GiB   "
                f"disk r {_mb(_rate(previous, sample, 'disk_read_bytes_total'))} "
                f"w {_mb(_rate(previous, sample, 'disk_write_bytes_total'))}   "
                f"net rx {_mb(_rate(previous, sample, 'network_receive_bytes_total'))} "
                f"tx {_mb(_rate(previous, sample, 'network_transmit_bytes_total'))}"
            )
        )
    for reading_line in read_situation(samples)[:4]:
        parts.append(_reading_text(reading_line))
    return Group(*parts)


def _reading_text(reading: Reading) -> Any:
    from rich.text import Text

    return Text(f"» {reading.text}", style=_SEVERITY_STYLE.get(reading.severity, ""))


def _util_of(sample: Sample, index: int) -> float | None:
    for reading in sample.gpus:
        if reading.index == index and reading.up and reading.gpu is not None:
            return reading.gpu.utilization_gpu_percent
    return None


def _process_rows(sample: Sample) -> list[tuple[str, str, str, str, str]]:
    rows = []
    for reading in sample.gpus:
        g: Gpu | None = reading.gpu
        if not reading.up or g is None or not g.processes:
            continue
        for proc in g.processes:
            container = (proc.container_id or "")[:12]
            if proc.kubernetes_pod_uid:
                container = f"pod {proc.kubernetes_pod_uid[:8]} {container}".strip()
            rows.append(
                (
                    str(reading.index),
                    str(proc.pid),
                    proc.name or "?",
                    container or "-",
                    f"{_gib(proc.used_memory_bytes)} GiB",
                )
            )
    return rows

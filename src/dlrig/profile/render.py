"""The readable report: the verdict first, then per rank the step split, a bar per step, the
top kernels and MFU. Fits 80 columns."""

from __future__ import annotations

from typing import Any

from dlrig.profile.kernels import short_name
from dlrig.profile.model import HOST_PHASES, PART_LABELS, ProfileReport, RankProfile

# One letter and colour per part of a step's bar (host phases on a CPU run, GPU parts else).
HOST_BAR = {
    "data_wait": ("D", "red"),
    "forward": ("F", "green"),
    "backward": ("B", "blue"),
    "optimizer": ("O", "magenta"),
    "other": (".", "white"),
}
GPU_BAR = {
    "compute": ("C", "green"),
    "communication_exposed": ("N", "cyan"),
    "memcpy": ("M", "yellow"),
    "idle_data_wait": ("D", "red"),
    "idle_host": ("_", "white"),
}
# Shorter labels for the bars' legend (80 columns).
LEGEND = {
    **PART_LABELS,
    "communication_exposed": "comm (exposed)",
    "idle_data_wait": "idle for data",
    "idle_host": "idle for host",
}
BAR_WIDTH = 40


def render_text(report: ProfileReport, console: Any) -> None:
    from rich.text import Text

    _verdict(report, console)
    for rank in report.ranks:
        console.print()
        _rank(rank, console)
    if report.stragglers:
        console.print()
        console.print(Text("Stragglers (the other ranks wait for them):", style="bold yellow"))
        for line in report.stragglers:
            console.print(f"  {line}")
    for note in report.notes:
        console.print(Text(note, style="dim"))


def _verdict(report: ProfileReport, console: Any) -> None:
    from rich.text import Text

    if report.verdict is None:
        step = report.ranks[0].mean("step_ms") if report.ranks else 0.0
        console.print(Text("No bottleneck worth a change", style="bold green"))
        console.print(
            f"The {step:.1f} ms step spends its time computing: no input wait, launch gap, "
            "exposed communication, FP32 matmul or unfused optimizer above 10 % of it."
        )
        return
    finding = report.verdict
    title = Text("Verdict: ", style="bold red")
    title.append(f"{finding.title} ", style="bold")
    title.append(f"[{finding.cause}]", style="dim")
    console.print(title)
    for line in finding.evidence:
        console.print(f"  {line}")
    console.print(Text(f"Fix: {finding.fix}", style="bold"))
    console.print(
        Text(f"Expected: up to {_gain(finding.gain)} faster per step ({finding.gain_basis})")
    )
    for other in report.findings[1:]:
        console.print(
            Text(f"  also: {other.title} [{other.cause}], up to {_gain(other.gain)}", style="dim")
        )


def _gain(gain: float) -> str:
    return f"×{gain:.2f}"


def _rank(rank: RankProfile, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    who = f"rank {rank.rank}" if rank.rank is not None else "trace"
    device = rank.device or ("CPU" if not rank.has_gpu else "GPU")
    head = Text(f"{who}: {rank.path}", style="bold")
    head.append(f"  {device}, {len(rank.steps)} steps, {rank.mean('step_ms'):.1f} ms mean")
    console.print(head)
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    table.add_column("host phase")
    table.add_column("ms/step", justify="right")
    table.add_column("share", justify="right")
    if rank.has_gpu:
        table.add_column("GPU part")
        table.add_column("ms/step", justify="right")
        table.add_column("share", justify="right")
    step = rank.mean("step_ms") or 1.0
    parts = list(GPU_BAR) if rank.has_gpu else []
    for i, phase in enumerate(HOST_PHASES):
        value = rank.mean("host", phase)
        row = [PART_LABELS[phase], f"{value:.1f}", f"{100 * value / step:.0f}%"]
        if rank.has_gpu:
            part = parts[i]
            gpu_value = rank.mean("gpu", part)
            row += [PART_LABELS[part], f"{gpu_value:.1f}", f"{100 * gpu_value / step:.0f}%"]
        table.add_row(*row)
    console.print(table)
    _bars(rank, console)
    if rank.kernels:
        kernels = Table(box=None, pad_edge=False, header_style="bold")
        kernels.add_column("top kernels", overflow="ellipsis", no_wrap=True, max_width=44)
        kernels.add_column("kind")
        kernels.add_column("calls", justify="right")
        kernels.add_column("ms", justify="right")
        kernels.add_column("share", justify="right")
        for kernel in rank.kernels[:8]:
            kernels.add_row(
                short_name(kernel.name, 44),
                kernel.category,
                str(kernel.count),
                f"{kernel.total_ms:.1f}",
                f"{100 * kernel.share:.1f}%",
            )
        console.print(kernels)
    mfu = rank.mfu
    if mfu.value is not None:
        console.print(
            f"MFU {100 * mfu.value:.1f}%: {mfu.achieved_tflops:.1f} of {mfu.peak_tflops:g} "
            f"TFLOP/s ({mfu.precision} peak of {mfu.gpu}; FLOPs from {mfu.flops_source})"
        )
    elif mfu.achieved_tflops is not None:
        console.print(
            f"{_rate(mfu.achieved_tflops * 1e12)} achieved (FLOPs from "
            f"{mfu.flops_source}); no MFU: {mfu.note}"
        )
    elif mfu.note:
        console.print(Text(f"no MFU: {mfu.note}", style="dim"))
    if rank.device_activity is not None:
        a = rank.device_activity
        read = {
            "utilisation": a.means.get("utilization_gpu_percent"),
            "SM active": a.means.get("sm_activity_percent"),
            "tensor active": a.means.get("tensor_activity_percent"),
            "DRAM active": a.means.get("dram_activity_percent"),
        }
        shown = ", ".join(f"{k} {v:.0f}%" for k, v in read.items() if v is not None)
        console.print(f"GPU {a.gpu} over these steps ({a.samples} readings): {shown or 'n/a'}")
        if a.note:
            console.print(Text(a.note, style="dim"))
    if rank.hta is not None:
        h = rank.hta
        console.print(
            Text(
                f"HTA temporal breakdown (steps {_steps(h.iterations)}): idle "
                f"{h.idle_pct:.1f}%, compute {h.compute_pct:.1f}%, non-compute "
                f"{h.non_compute_pct:.1f}%",
                style="dim",
            )
        )
    for note in rank.notes:
        console.print(Text(note, style="dim"))


def _rate(flops_per_s: float) -> str:
    for unit, scale in (("TFLOP/s", 1e12), ("GFLOP/s", 1e9), ("MFLOP/s", 1e6)):
        if flops_per_s >= scale:
            return f"{flops_per_s / scale:.1f} {unit}"
    return f"{flops_per_s:.0f} FLOP/s"


def _steps(numbers: tuple[int, ...]) -> str:
    if not numbers:
        return "all"
    if len(numbers) == 1:
        return str(numbers[0])
    return f"{numbers[0]}-{numbers[-1]}"


def _bars(rank: RankProfile, console: Any) -> None:
    """A stacked bar per step, scaled to the longest step."""
    from rich.text import Text

    longest = max((s.step_ms for s in rank.steps), default=0.0) or 1.0
    legend = GPU_BAR if rank.has_gpu else HOST_BAR
    for step in rank.steps[:12]:
        values = step.gpu if step.gpu is not None else step.host
        line = Text(f"{step.name.removeprefix('ProfilerStep'):>6} ")
        width = BAR_WIDTH * step.step_ms / longest
        used = 0
        for key, (letter, colour) in legend.items():
            share = values.get(key, 0.0) / step.step_ms if step.step_ms > 0 else 0.0
            cells = round(width * share)
            cells = min(cells, BAR_WIDTH - used)
            used += cells
            line.append(letter * cells, style=colour)
        line.append(f" {step.step_ms:.1f} ms")
        console.print(line)
    if len(rank.steps) > 12:
        console.print(Text(f"  ... {len(rank.steps) - 12} more steps", style="dim"))
    console.print(
        Text(
            "  " + "  ".join(f"{letter} {LEGEND[key]}" for key, (letter, _) in legend.items()),
            style="dim",
        )
    )

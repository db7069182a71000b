"""Readable renderings of a doctor report: rich text for terminals, Markdown for bug reports."""

from __future__ import annotations

import re
from typing import Any

from dlrig.doctor import DoctorReport
from dlrig.doctor.facts import driver_cuda_text, torch_cuda
from dlrig.doctor.registry import AREAS
from dlrig.machine.model import Machine
from dlrig.report import CheckResult, Status
from dlrig.units import human_bytes

_STYLE = {
    Status.FAIL: ("✗ FAIL", "bold red"),
    Status.WARN: ("! WARN", "yellow"),
    Status.INFO: ("i info", "cyan"),
    Status.OK: ("✓ ok  ", "green"),
    Status.SKIP: ("- skip", "dim"),
}


def machine_facts(m: Machine) -> list[tuple[str, str]]:
    """The one-screen summary of a machine, as (label, value) rows."""
    rows: list[tuple[str, str]] = []
    origin = m.origin.kind if not m.origin.path else f"{m.origin.kind} ({m.origin.path})"
    rows.append(("source", origin + (f", {m.origin.detail}" if m.origin.detail else "")))
    if m.origin.hostname:
        rows.append(("host", m.origin.hostname))
    if m.os:
        text = " ".join(
            p
            for p in (
                m.os.name,
                m.os.kernel_release and f"kernel {m.os.kernel_release}",
                m.os.glibc_version and f"glibc {m.os.glibc_version}",
            )
            if p
        )
        if text:
            rows.append(("OS", text))
    if m.cpu and (m.cpu.model or m.cpu.threads):
        parts = [m.cpu.model or "CPU"]
        if m.cpu.sockets:
            parts.append(f"{m.cpu.sockets} socket(s)")
        if m.cpu.cores:
            parts.append(f"{m.cpu.cores} cores")
        if m.cpu.threads:
            parts.append(f"{m.cpu.threads} threads")
        rows.append(("CPU", ", ".join(parts)))
    if m.memory and m.memory.total_bytes:
        rows.append(("RAM", human_bytes(m.memory.total_bytes)))
    if m.driver and (m.driver.version or m.driver.cuda_version):
        cuda = driver_cuda_text(m)
        rows.append(("driver", f"{m.driver.version or '?'}" + (f" ({cuda})" if cuda else "")))
    if m.gpus is not None:
        if m.gpus:
            names: dict[str, int] = {}
            for gpu in m.gpus:
                names[gpu.name] = names.get(gpu.name, 0) + 1
            text = ", ".join(f"{count} × {name}" for name, count in names.items())
            memory = m.gpus[0].memory_total_bytes
            rows.append(("GPUs", text + (f" ({human_bytes(memory)} each)" if memory else "")))
        else:
            rows.append(("GPUs", "none (CPU-only machine)"))
    if m.frameworks:
        torch = m.frameworks.torch
        if torch:
            build = torch_cuda(m)
            if build:
                flavour = "CUDA " + build
            elif torch.build == "rocm":
                flavour = "ROCm " + (torch.hip_version or "?")
            else:
                flavour = "CPU-only"
            rows.append(("torch", f"{torch.version} ({flavour})"))
        else:
            rows.append(("torch", "not installed"))
        if m.frameworks.python_executable:
            rows.append(
                ("python", f"{m.frameworks.python_executable} ({m.frameworks.python_version})")
            )
    if m.cuda_toolkit and m.cuda_toolkit.nvcc_version:
        rows.append(("nvcc", m.cuda_toolkit.nvcc_version))
    if m.rocm is not None:
        parts = [f"ROCm {m.rocm.version}"] if m.rocm.version else []
        if m.rocm.amdgpu_driver_version:
            parts.append(f"amdgpu driver {m.rocm.amdgpu_driver_version}")
        text = ", ".join(parts)
        if text:
            rows.append(("rocm", text))
    if m.gaudi is not None and (m.gaudi.driver_version or m.gaudi.tool):
        rows.append(
            ("gaudi", f"driver {m.gaudi.driver_version or '?'}, hl-smi {m.gaudi.tool or '?'}")
        )
    return rows


def render_text(
    report: DoctorReport, console: Any, show_ok: bool = True, verbose: bool = False
) -> None:
    from rich.table import Table
    from rich.text import Text

    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for label, value in machine_facts(report.machine):
        facts.add_row(label, value)
    console.print(Text("dlrig doctor", style="bold"))
    console.print(facts)
    console.print()
    for area in AREAS:
        results = sorted((r for r in report.checks if r.area == area), key=lambda r: r.status.rank)
        shown = [
            r
            for r in results
            if r.status not in (Status.SKIP,) and (show_ok or r.status is not Status.OK)
        ]
        skipped = [r for r in results if r.status is Status.SKIP]
        if not shown and not (verbose and skipped):
            continue
        console.print(Text(area.upper(), style="bold underline"))
        for result in shown + (skipped if verbose else []):
            _render_result(result, console, verbose)
        console.print()
    counts = report.summary.counts
    line = Text()
    for status in (Status.FAIL, Status.WARN, Status.INFO, Status.OK, Status.SKIP):
        label, style = _STYLE[status]
        line.append(f"{counts[status.value]} {status.value}", style=style)
        line.append("  ")
    console.print(line)
    if report.machine.probe_issues and verbose:
        console.print(Text("not available:", style="bold"))
        for issue in report.machine.probe_issues:
            console.print(f"  {issue.source}: {issue.reason}", style="dim")
    elif report.machine.probe_issues and report.machine.origin.kind == "live":
        console.print(
            f"{len(report.machine.probe_issues)} source(s) could not be read; --verbose lists them",
            style="dim",
        )
    if any(r.status in (Status.FAIL, Status.WARN) for r in report.checks):
        console.print("More on a check: dlrig doctor --explain CHECK_ID", style="dim")


def _render_result(result: CheckResult, console: Any, verbose: bool) -> None:
    from rich.text import Text

    label, style = _STYLE[result.status]
    line = Text()
    line.append(f"  {label} ", style=style)
    line.append(result.title)
    line.append(f"  [{result.id}]", style="dim")
    console.print(line)
    if result.status in (Status.FAIL, Status.WARN) or verbose:
        for evidence in result.evidence:
            console.print(
                Text(f"           {evidence}", style="dim" if evidence.startswith("check:") else "")
            )
    if result.fix and result.status in (Status.FAIL, Status.WARN, Status.INFO):
        first, *rest = result.fix.splitlines()
        console.print(Text(f"           fix: {first}", style="bold"))
        for extra in rest:
            console.print(Text(f"                {extra}", style="bold"))


# A fix line's command starts with one of these words (at the line's start, or after the
# prose that introduces it: "then: pip install ...", "...: sudo apt install ...").
_COMMAND = re.compile(
    r"(?:^|(?<=:\s)|(?<=^then\s))(?=(?:sudo|pip3?|python3?|conda|export|unset|nvidia-smi|"
    r"systemctl|apt(?:-get)?|dnf|modprobe|ulimit|mount|dlrig|docker|echo|rm|ln)\b)"
)


def split_fix_line(line: str) -> tuple[str, str | None]:
    """(prose, command or None): the part of a fix line a shell can run, apart from the words
    around it, so a pasted code block holds commands only."""
    stripped = line.strip()
    match = _COMMAND.search(stripped)
    if match is None:
        return stripped, None
    prose = stripped[: match.start()].strip()
    return prose, stripped[match.start() :].strip()


def _markdown_fix(fix: str) -> list[str]:
    """Prose as list items, each command in its own fenced block under the prose it follows."""
    lines: list[str] = []
    for raw in fix.splitlines():
        prose, command = split_fix_line(raw)
        if prose:
            lines.append(f"    - {prose}")
        if command:
            pad = " " * (6 if prose else 4)  # inside the prose's list item, or the fix's
            lines.extend([f"{pad}```sh", f"{pad}{command}", f"{pad}```"])
    return lines


def render_markdown(report: DoctorReport) -> str:
    """A Markdown block to paste into a bug report."""
    lines = ["### dlrig doctor", "", "| | |", "|---|---|"]
    for label, value in machine_facts(report.machine):
        lines.append(f"| {label} | {value.replace('|', '/')} |")
    lines.append("")
    problems = [r for r in report.checks if r.status in (Status.FAIL, Status.WARN)]
    counts = report.summary.counts
    lines.append(
        f"**{counts['fail']} fail, {counts['warn']} warn, {counts['info']} info, {counts['ok']} ok, "
        f"{counts['skip']} skipped**"
    )
    lines.append("")
    for result in sorted(problems, key=lambda r: r.status.rank):
        lines.append(f"- **{result.status.value.upper()}** `{result.id}`: {result.title}")
        for evidence in result.evidence:
            lines.append(f"  - {evidence}")
        if result.fix:
            lines.append("  - fix:")
            lines.extend(_markdown_fix(result.fix))
    others = [r for r in report.checks if r.status in (Status.INFO, Status.OK)]
    if others:
        lines.append("")
        lines.append("<details><summary>other checks</summary>")
        lines.append("")
        for result in sorted(others, key=lambda r: (r.area, r.id)):
            lines.append(f"- {result.status.value} `{result.id}`: {result.title}")
        lines.append("")
        lines.append("</details>")
    return "\n".join(lines) + "\n"

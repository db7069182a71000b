"""Readable rendering of a diagnosis: root cause first, evidence lines highlighted."""

from __future__ import annotations

from typing import Any

from dlrig.diagnose import POSSIBLE_BELOW, Diagnosis, Finding


def render_text(diagnosis: Diagnosis, console: Any, show_secondary: bool = True) -> None:
    from rich.text import Text

    scanned = f"{diagnosis.lines:,} lines, {diagnosis.bytes / 1e6:,.1f} MB from {', '.join(diagnosis.sources) or 'input'}"
    if not diagnosis.causes and diagnosis.first_error is not None:
        # A failure no signature explains: say so, and quote where it started.
        error = diagnosis.first_error
        console.print(Text("No known cause for this failure", style="bold yellow"))
        where = Text(f"first error at {error.source}:{error.line}", style="dim")
        if diagnosis.first_error_rank is not None:
            where.append(f" (rank {diagnosis.first_error_rank})", style="dim")
        console.print(where)
        console.print(Text(f"  {error.text}", style="bold magenta"))
        console.print(
            "Search for that line in the issue tracker of the library that printed it, or "
            "run again with more logging (NCCL_DEBUG=INFO, CUDA_LAUNCH_BLOCKING=1, "
            "TORCH_SHOW_CPP_STACKTRACES=1) for a line dlrig knows."
        )
        _render_survived(diagnosis, console)
        console.print(Text(f"scanned {scanned}", style="dim"))
        return
    if not diagnosis.causes:
        console.print(Text("No failure cause found", style="bold green"))
        _render_survived(diagnosis, console)
        console.print(Text(f"scanned {scanned}", style="dim"))
        if diagnosis.note:
            console.print(Text(diagnosis.note, style="dim"))
        return
    root = diagnosis.causes[0]
    _render_finding(root, console, headline=True)
    secondary = diagnosis.causes[1:]
    if secondary and show_secondary:
        console.print()
        console.print(Text("Also found (explained by the root cause or weaker):", style="bold"))
        for finding in secondary:
            _render_finding(finding, console, headline=False)
    _render_survived(diagnosis, console)
    console.print()
    console.print(Text(f"scanned {scanned}", style="dim"))


def _render_survived(diagnosis: Diagnosis, console: Any) -> None:
    """Errors the run went on past: shown so nobody wonders why they were not the cause."""
    from rich.text import Text

    if not diagnosis.survived:
        return
    console.print()
    console.print(Text("Survived (the run went on past these):", style="bold"))
    for finding in diagnosis.survived:
        console.print(Text(f"  - {finding.title} [{finding.cause}]: {finding.reason}"))


def _render_finding(finding: Finding, console: Any, headline: bool) -> None:
    from rich.text import Text

    if headline:
        title = Text()
        # Generic evidence is named, not asserted: below one half it is a lead, not a verdict.
        if finding.confidence < POSSIBLE_BELOW:
            title.append("Possible cause: ", style="bold yellow")
        else:
            title.append("Root cause: ", style="bold red")
        title.append(f"{finding.title} ", style="bold")
        title.append(f"[{finding.cause}]", style="dim")
        title.append(f"  confidence {finding.confidence:.0%}", style="yellow")
        console.print(title)
        console.print(finding.explanation)
        if finding.ranks:
            console.print(Text(f"ranks: {', '.join(map(str, finding.ranks))}", style="dim"))
        console.print(Text("evidence:", style="bold"))
        for evidence in finding.lines:
            line = Text(f"  {evidence.source}:{evidence.line}: ", style="dim")
            line.append(evidence.text, style="bold magenta")
            console.print(line)
        console.print(Text("fix:", style="bold"))
        for number, fix in enumerate(finding.fixes, 1):
            console.print(Text(f"  {number}. {fix}", style="bold" if number == 1 else ""))
        why = (
            "why it is named"
            if finding.confidence < POSSIBLE_BELOW
            else "why this is the root cause"
        )
        console.print(Text(f"{why}: {finding.reason}", style="dim"))
    else:
        line = Text(f"  - {finding.title} [{finding.cause}]: {finding.reason}")
        console.print(line)
        if finding.lines:
            first = finding.lines[0]
            console.print(
                Text(f"      {first.source}:{first.line}: {first.text[:160]}", style="dim")
            )

"""The readable report of a provision run: files written, choices made and why."""

from __future__ import annotations

from typing import Any

from dlrig.provision.model import Bundle


def render_text(bundle: Bundle, out: Any) -> None:
    out.print(
        f"[bold]dlrig provision {bundle.target}[/bold] from {bundle.facts.origin}: {bundle.facts.summary()}"
    )
    out.print()
    for index, generated in enumerate(bundle.files):
        where = bundle.written[index] if index < len(bundle.written) else generated.path
        mode = " (executable)" if generated.executable else ""
        out.print(f"  wrote {where}{mode} — {generated.description}")
    if bundle.decisions:
        out.print()
        out.print("[bold]choices[/bold]")
        for decision in bundle.decisions:
            out.print(f"  {decision.what}: {decision.choice} — {decision.why}")
            if decision.source:
                out.print(f"    source: {decision.source}", style="dim")
    for warning in bundle.warnings:
        out.print(f"[yellow]warning:[/yellow] {warning}")

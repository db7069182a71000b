"""The readable report of a provision run: files written, choices made and why."""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from dlrig.provision.model import Bundle


def render_text(bundle: Bundle, out: Any) -> None:
    out.print(
        f"[bold]dlrig provision {bundle.target}[/bold] from {escape(bundle.facts.origin)}: "
        f"{escape(bundle.facts.summary())}"
    )
    out.print()
    for index, generated in enumerate(bundle.files):
        where = bundle.written[index] if index < len(bundle.written) else generated.path
        mode = " (executable)" if generated.executable else ""
        out.print(escape(f"  wrote {where}{mode} — {generated.description}"))
    if bundle.decisions:
        out.print()
        out.print("[bold]choices[/bold]")
        for decision in bundle.decisions:
            # Requirements such as tensorflow[and-cuda] are text, not rich markup.
            out.print(escape(f"  {decision.what}: {decision.choice} — {decision.why}"))
            if decision.source:
                out.print(escape(f"    source: {decision.source}"), style="dim")
    for warning in bundle.warnings:
        out.print(f"[yellow]warning:[/yellow] {escape(warning)}")

"""`dlrig report`: one self-contained HTML page from any saved dlrig JSON.

Python API:

    from dlrig.accept import report
    page = report.build(["accept.json", "fit.json"], compare="last-month/accept.json")
    report.write_html(page, "report.html")      # the page, rendered from `page` alone
    page["summary"]["problems"]                 # what fails, what to do first

`build` returns the page document (`dlrig report --json` prints it); `write_html` renders it
with its charts inline (SVG), no script and nothing fetched from a network.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dlrig.accept.report import html, inputs, model

__all__ = ["build", "build_from_documents", "render_html", "write_html"]


def build(
    paths: Sequence[str], compare: str | None = None, *, several_machines: bool = False
) -> dict[str, Any]:
    """The page document for these files (and what changed since `compare`).

    Files of different machines are refused unless `several_machines` is set; then the page
    says how many machines it covers and names each."""
    loaded = [inputs.load(path) for path in paths]
    old = inputs.load(compare) if compare else None
    return model.build(loaded, old, several_machines=several_machines)


def build_from_documents(
    documents: Sequence[tuple[str, dict[str, Any]]],
    compare: str | None = None,
    *,
    several_machines: bool = False,
) -> dict[str, Any]:
    """The page for documents already in memory, as (path, document) pairs."""
    loaded = [inputs.Input(path, str(doc.get("schema")), doc) for path, doc in documents]
    old = inputs.load(compare) if compare else None
    return model.build(loaded, old, several_machines=several_machines)


def render_html(page: dict[str, Any]) -> str:
    return html.render(page)


def write_html(page: dict[str, Any], path: Path | str) -> Path:
    return html.write(page, path)

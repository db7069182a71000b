"""mkdocs hook: the knowledge-tables page, generated from the package's own manifest when the
site is built, so it lists every table dlrig ships (with its sources) and cannot go stale."""

from __future__ import annotations

import collections
import tomllib
from importlib import resources
from typing import Any

MARKER = "<!-- knowledge-tables -->"
SOURCES_SHOWN = 6


def _cell(text: str, limit: int = 300) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render() -> str:
    """One section per table: what it holds, its columns, rows, dates and sources."""
    from dlrig.knowledge import tables

    out = []
    for name, info in sorted(tables.manifest().items()):
        out.append(f"## `{name}`\n")
        out.append(f"{info.description}\n")
        out.append(f"- file: `src/dlrig/knowledge/data/{info.file}` (version {info.version})")
        if info.file.endswith(".csv"):
            rows = tables.rows(name)
            dates = sorted(r["as_of"] for r in rows if r.get("as_of"))
            span = f", dated {dates[0]} to {dates[-1]}" if dates else ""
            out.append(f"- {len(rows)} rows{span}")
            out.append(f"- columns: {', '.join(f'`{c}`' for c in info.required_columns)}")
            sources = collections.Counter(r.get("source", "") for r in rows if r.get("source"))
            out.append(f"- {len(sources)} distinct sources; the most used:\n")
            out.append("| rows | source |\n|---:|---|")
            for source, count in sources.most_common(SOURCES_SHOWN):
                out.append(f"| {count} | {_cell(source)} |")
        else:
            text = resources.files("dlrig.knowledge").joinpath("data", info.file).read_text()
            data = tomllib.loads(text)
            entries = sum(len(v) if isinstance(v, list | dict) else 1 for v in data.values())
            out.append(f"- a TOML file with {entries} entries; each carries its `source`")
        out.append("")
    return "\n".join(out)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, render())
    return markdown

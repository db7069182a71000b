"""The page itself: the Jinja2 template under templates/ filled from the page document, with
the charts inline. One file, no scripts, no network: it opens offline, attaches to a ticket
and prints to PDF."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from dlrig import __version__
from dlrig.accept.report import charts
from dlrig.jinja import template_environment
from dlrig.outputs import write_text_atomic

TEMPLATE = "page.html.j2"


def _gib(value: Any) -> str:
    return f"{value / 2**30:.1f} GiB" if isinstance(value, int | float) else "—"


def _num(value: Any, digits: int = 1, unit: str = "") -> str:
    if not isinstance(value, int | float):
        return "—"
    text = f"{value:,.{digits}f}"
    return f"{text} {unit}".strip()


def _share(value: Any) -> str:
    return f"{value:.0%}" if isinstance(value, int | float) else "—"


def _duration(seconds: Any) -> str:
    if not isinstance(seconds, int | float):
        return "—"
    minutes, rest = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{rest:02d}" if hours else f"{minutes}:{rest:02d}"


def _is_command(line: str) -> bool:
    return line.startswith(("check:", "sudo ", "nvidia-smi ", "fix:"))


@functools.cache
def _environment() -> Any:
    environment = template_environment(
        "dlrig.accept.report", "report", "dlrig report", autoescape=("html", "j2")
    )
    environment.filters.update(
        gib=_gib, num=_num, share=_share, duration=_duration, is_command=_is_command
    )
    return environment


def render(page: dict[str, Any]) -> str:
    import markupsafe

    environment = _environment()
    drawn = {
        where: [{"id": c.id, "title": c.title, "svg": markupsafe.Markup(c.svg)} for c in found]
        for where, found in charts.for_page(page).items()
    }
    text: str = environment.get_template(TEMPLATE).render(
        page=page, charts=drawn, version=__version__
    )
    return text


def write(page: dict[str, Any], path: Path | str) -> Path:
    return write_text_atomic(path, render(page))

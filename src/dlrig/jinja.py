"""Jinja2 environments over a package's templates/ folder, set alike wherever dlrig renders
files: a missing value is an error, never an empty string, and block tags leave no blank
lines behind."""

from __future__ import annotations

from typing import Any

from dlrig.extras import require


def template_environment(
    package: str, extra: str, purpose: str, autoescape: tuple[str, ...] = (), **settings: Any
) -> Any:
    """An Environment loading `package`'s templates/; templates whose names end in one of
    `autoescape` are HTML-escaped. `settings` are the Environment's other options."""
    jinja2 = require("jinja2", extra, purpose)
    return jinja2.Environment(
        loader=jinja2.PackageLoader(package, "templates"),
        autoescape=jinja2.select_autoescape(list(autoescape)) if autoescape else False,
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
        **settings,
    )

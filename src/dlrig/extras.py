"""Optional dependencies: the heavy packages live in extras (pyproject.toml) and are imported
only where a command needs them, so that `import dlrig` stays light; a missing one is a
MissingExtraError naming the extra that brings it."""

from __future__ import annotations

import importlib
from typing import Any

from dlrig.errors import MissingExtraError


def require(module: str, extra: str, purpose: str, package: str | None = None) -> Any:
    """`module` imported, or MissingExtraError for `purpose` naming `package` (what pip calls
    it, where that is not the module's name) and the extra."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(package or module, extra, purpose) from None


def pyplot(extra: str, purpose: str) -> Any:
    """matplotlib.pyplot drawing into files (the Agg backend: no display, none needed)."""
    matplotlib = require("matplotlib", extra, purpose)
    matplotlib.use("Agg")
    return require("matplotlib.pyplot", extra, purpose, package="matplotlib")

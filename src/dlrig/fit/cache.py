"""The user's cache of traced steps, so that asking again (another GPU count, another budget)
does not trace again.

A trace depends only on the workload, the tracer's code and the torch / transformers / peft
versions (`fit.store` keys each stored basis by all of them), so a stored one is exactly what
tracing would produce again; anything changed traces afresh. The cache lives in
`$DLRIG_CACHE_DIR`, else `$XDG_CACHE_HOME/dlrig/fit-traces` (`~/.cache/dlrig/fit-traces`); a
basis is about 20 kB and the folder keeps the newest `KEEP_FILES`. `DLRIG_NO_CACHE=1` turns it
off. A folder that cannot be created or written is read only, or skipped: never an error.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

KEEP_FILES = 400


def folder(env: Mapping[str, str] | None = None) -> Path | None:
    """Where the cache is, or None when it is turned off."""
    env = os.environ if env is None else env
    if env.get("DLRIG_NO_CACHE", "") not in ("", "0"):
        return None
    if env.get("DLRIG_CACHE_DIR"):
        return Path(env["DLRIG_CACHE_DIR"])
    base = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dlrig" / "fit-traces"


@contextlib.contextmanager
def user_cache(env: Mapping[str, str] | None = None) -> Iterator[Path | None]:
    """Within the block, traces are read from (and new ones stored in) the user's cache."""
    from dlrig.fit import store  # lazy: numpy; the CLI imports this module for --help

    path = folder(env)
    if path is not None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError:
            path = None
    if path is None:
        yield None
        return
    writable = os.access(path, os.W_OK)
    with store.use(path, write=writable):
        yield path
    if writable:
        prune(path)


def prune(path: Path, keep: int = KEEP_FILES) -> None:
    """Keep the newest `keep` stored bases (a new tracer or torch makes the old ones unused)."""
    with contextlib.suppress(OSError):
        files = sorted(path.glob("*.npz"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[keep:]:
            old.unlink(missing_ok=True)

"""Reading files a user names, with one clear message for each way it can go wrong.

Every command that takes a path reads it through here, so "missing", "a directory",
"empty", "binary" and "too large" read the same everywhere and exit with code 2.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dlrig.errors import InputError

_BINARY_SNIFF_BYTES = 8192


def _size_text(size: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def check_readable_file(path: Path | str, what: str) -> Path:
    """The path, or an InputError naming it and saying what is wrong."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file", fix=f"check the path of the {what}")
    if p.is_dir():
        raise InputError(
            f"{p}: is a directory, not a file", fix=f"give the path of the {what} file"
        )
    if not os.access(p, os.R_OK):
        raise InputError(f"{p}: permission denied", fix=f"make the {what} readable (or use sudo)")
    return p


def read_text(path: Path | str, what: str, max_bytes: int) -> str:
    """The whole file as text, refusing empty, binary and oversized files."""
    p = check_readable_file(path, what)
    size = p.stat().st_size
    if size == 0:
        raise InputError(f"{p}: the file is empty", fix=f"give a file that holds the {what}")
    if size > max_bytes:
        raise InputError(
            f"{p}: the file is too large ({_size_text(size)}; the limit is "
            f"{_size_text(max_bytes)})",
            fix=f"give the {what} alone, not a larger dump",
        )
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise InputError(f"{p}: cannot be read ({exc.strerror})", fix="check the file") from None
    return decode_text(data, str(p), what)


def read_json(path: Path | str, what: str, max_bytes: int, fix: str) -> Any:
    """The file's JSON document, read as `read_text` reads; `fix` says what to give instead
    of a file that is not JSON."""
    text = read_text(path, what, max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})", fix=fix) from None


def decode_text(data: bytes, label: str, what: str, gzip_ok: bool = False) -> str:
    """`data` as text; an InputError naming `label` when it is binary or not UTF-8 (a few
    stray bytes are replaced, as a log cut mid-character has them). UTF-16 with its byte-order
    mark (what Windows PowerShell's `>` writes) and UTF-8's mark are read as text too."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return data.decode("utf-16", errors="replace")
    data = data.removeprefix(b"\xef\xbb\xbf")
    if b"\x00" in data[:_BINARY_SNIFF_BYTES]:
        packed = "gzip is fine" if gzip_ok else "not compressed"
        raise InputError(
            f"{label}: is a binary file, not text", fix=f"give the {what} as text ({packed})"
        )
    text = data.decode("utf-8", errors="replace")
    if text.count("\ufffd") > max(16, len(text) // 100):
        raise InputError(
            f"{label}: is not UTF-8 text",
            fix=f"give the {what} as UTF-8 text (e.g. `iconv -t utf-8`)",
        )
    return text


def load_factory(target: str, returns: str, example: str) -> Callable[[], Any]:
    """The callable named by a user's `package.module:factory` (the current directory is
    importable, as with `python -m`); InputError when it cannot be imported or found."""
    module_name, _, factory_name = target.partition(":")
    if not module_name or not factory_name:
        raise InputError(f"{target!r}: not package.module:factory", fix=f"e.g. {example}")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - the user's module: report whatever it raised
        raise InputError(
            f"{module_name}: cannot import it ({type(exc).__name__}: {exc})",
            fix="check the module path and PYTHONPATH",
        ) from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise InputError(
            f"{target}: {module_name} has no callable {factory_name!r}",
            fix=f"name a function or class that returns {returns}",
        )
    return factory  # type: ignore[no-any-return]


def call_factory(target: str, factory: Callable[[], Any]) -> Any:
    """Call a user's factory; whatever it raises becomes one clear InputError."""
    try:
        return factory()
    except Exception as exc:  # noqa: BLE001 - the user's code: report whatever it raised
        raise InputError(
            f"{target}: the factory raised {type(exc).__name__}: {exc}",
            fix="fix the factory, or call it yourself to see the traceback",
        ) from None

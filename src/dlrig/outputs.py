"""Writing files for the user: atomically, so an interrupted write never leaves half a file."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from dlrig.errors import InputError


def write_text_atomic(path: Path | str, text: str) -> Path:
    """Write `text` to `path` via a temporary file in the same folder and a rename."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path | str, data: bytes) -> Path:
    """Write `data` to `path` via a temporary file in the same folder and a rename."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if not folder.is_dir():
        raise InputError(
            f"{target}: the folder {folder} does not exist", fix="create it or pick another path"
        )
    if target.is_dir():
        raise InputError(f"{target}: is a directory", fix="give a file name")
    try:
        handle, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise InputError(
            f"{target}: cannot write ({exc.strerror})", fix="check permissions and free space"
        ) from None
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temp_name, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise InputError(
            f"{target}: cannot write ({exc.strerror})", fix="check permissions and free space"
        ) from None
    return target


def ensure_directory(path: Path | str, option: str) -> Path:
    """The directory a user named for output (`option` says which), created if needed."""
    directory = Path(path)
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{option} {directory}: is not a directory", fix="give a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"{option} {directory}: cannot create it ({exc.strerror})", fix="pick another path"
        ) from None
    return directory

"""Writing files for the user: atomically, readable as the umask says, never half a file.

A file appears whole or not at all: it is written to a temporary name in the same folder,
flushed to disk, renamed over the target, and the folder itself is synced so the rename
survives a power cut. The temporary file is removed on any way out, an interrupt included.
Permissions are `0o666 & ~umask` (like `open()` or a shell's `>`), not mkstemp's 0600: a
Prometheus or Grafana running as another user must be able to read the rules dlrig wrote.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from dlrig.errors import InputError


def current_umask() -> int:
    """The process umask (reading it means setting it; put it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text_atomic(path: Path | str, text: str, mode: int = 0o666) -> Path:
    """Write `text` to `path` via a temporary file in the same folder and a rename."""
    return write_bytes_atomic(path, text.encode("utf-8"), mode=mode)


def write_bytes_atomic(path: Path | str, data: bytes, mode: int = 0o666) -> Path:
    """Write `data` to `path` atomically; `mode` is masked by the umask (0o777 for scripts)."""
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
            os.fchmod(stream.fileno(), mode & ~current_umask())
            os.fsync(stream.fileno())
        os.replace(temp_name, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise InputError(
            f"{target}: cannot write ({exc.strerror})", fix="check permissions and free space"
        ) from None
    except BaseException:
        # An interrupt (Ctrl-C, SIGTERM via dlrig.lifecycle) must not leave `.NAME.*.tmp`.
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
    _sync_directory(folder)
    return target


def _sync_directory(folder: Path) -> None:
    """fsync the folder so the rename itself is on disk (not possible on every filesystem)."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def ensure_directory(path: Path | str, option: str = "--out") -> Path:
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

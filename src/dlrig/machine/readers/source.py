"""The bytes of one piece of recorded evidence, from wherever the user points `--from`.

A regular file, `-` for stdin (`nvidia-smi -q -x | dlrig doctor --from -`), a pipe from
process substitution (`--from <(nvidia-smi)`, which is a FIFO of size 0), a /proc file (size 0
although it has content) or a gzip file (as `dlrig diagnose` reads logs). The size on disk
says nothing for most of these, so the content is read, up to a limit, and judged.
"""

from __future__ import annotations

import gzip
import io
import sys
import zlib
from pathlib import Path
from typing import Protocol

from dlrig.errors import InputError
from dlrig.inputs import check_readable_file, decode_text

MAX_INPUT_BYTES = 100 * 1000 * 1000
_WHAT = "recorded machine evidence"
_GZIP_MAGIC = b"\x1f\x8b"


class _Readable(Protocol):
    def read(self, size: int = ..., /) -> bytes: ...


def _mb(size: int) -> str:
    return f"{size / 1e6:.0f} MB"


def _read_bounded(stream: _Readable, label: str, limit: int) -> bytes:
    data = stream.read(limit + 1)
    if len(data) > limit:
        raise InputError(
            f"{label}: too large (more than {_mb(limit)})",
            fix=f"give the {_WHAT} alone, not a larger dump",
        )
    return data


def _raw(path: Path | str, limit: int) -> tuple[bytes, str]:
    if str(path) == "-":
        if sys.stdin is None or sys.stdin.isatty():
            raise InputError(
                "--from -: stdin is a terminal, not a file",
                fix="pipe the output in: nvidia-smi -q -x | dlrig doctor --from -",
            )
        return _read_bounded(sys.stdin.buffer, "<stdin>", limit), "<stdin>"
    p = check_readable_file(path, _WHAT)
    try:
        with p.open("rb") as stream:
            return _read_bounded(stream, str(p), limit), str(p)
    except OSError as exc:
        raise InputError(f"{p}: cannot be read ({exc.strerror})", fix="check the file") from None


def read_evidence(path: Path | str, limit: int = MAX_INPUT_BYTES) -> str:
    """The text of `path` (see the module doc); InputError (exit 2) when empty, binary, not
    UTF-8 or too large, naming the input."""
    data, label = _raw(path, limit)
    if data.startswith(_GZIP_MAGIC):
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(data)) as unzipped:
                data = _read_bounded(unzipped, label, limit)
        except (OSError, EOFError, zlib.error):
            raise InputError(
                f"{label}: a damaged gzip file", fix="give the file uncompressed, or re-download it"
            ) from None
    if not data.strip():
        raise InputError(f"{label}: the file is empty", fix=f"give a file that holds the {_WHAT}")
    return decode_text(data, label, _WHAT, gzip_ok=True)

"""Writing a bundle to --out: atomically, scripts executable, nothing replaced unasked."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dlrig.errors import InputError
from dlrig.outputs import ensure_directory, write_text_atomic
from dlrig.provision.model import Bundle


def write_bundle(bundle: Bundle, out_dir: Path | str, overwrite: bool = False) -> Bundle:
    root = ensure_directory(out_dir)
    targets = [root / generated.path for generated in bundle.files]
    existing = [str(t) for t in targets if t.exists()]
    if existing and not overwrite:
        raise InputError(
            f"--out {root}: {existing[0]} already exists"
            + (f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""),
            fix="pass --overwrite to replace them, or choose another --out",
        )
    written = []
    for generated, target in zip(bundle.files, targets, strict=True):
        ensure_directory(target.parent)
        write_text_atomic(target, generated.content, mode=0o777 if generated.executable else 0o666)
        written.append(str(target))
    return replace(bundle, written=tuple(written))

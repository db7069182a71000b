"""Saved snapshots (`dlrig doctor --save FILE`) -> Machine."""

from __future__ import annotations

import json

from dlrig.machine.model import SCHEMA_NAME, Machine


def looks_like(text: str) -> bool:
    return text.lstrip().startswith("{")


def read(text: str, path: str | None) -> Machine:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the JSON is malformed ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(document, dict):
        raise ValueError("the JSON is not an object, so not a dlrig machine snapshot")
    if document.get("schema") != SCHEMA_NAME:
        # A `doctor --json` report embeds the snapshot: accept it too.
        embedded = document.get("machine")
        if isinstance(embedded, dict) and embedded.get("schema") == SCHEMA_NAME:
            document = embedded
        else:
            keys = ", ".join(sorted(document)[:5]) or "no keys"
            raise ValueError(
                f'the JSON is not a dlrig machine snapshot (no "schema": "{SCHEMA_NAME}"; '
                f"it has {keys})"
            )
    return Machine.from_dict(document)

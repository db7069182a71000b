"""Saved snapshots (`dlrig doctor --save FILE`) -> Machine."""

from __future__ import annotations

from dlrig.machine.model import SCHEMA_NAME, Machine
from dlrig.machine.readers.common import parse_json


def looks_like(text: str) -> bool:
    return text.lstrip().startswith("{")


def read(text: str, path: str | None) -> Machine:
    document = parse_json(text)
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

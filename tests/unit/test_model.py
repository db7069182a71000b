"""The machine snapshot is frozen and round-trips through JSON exactly."""

from __future__ import annotations

import dataclasses
import json

import pytest

from dlrig.machine import readers
from dlrig.machine.model import SCHEMA_VERSION, Gpu, Machine
from dlrig.machine.probe import collect
from tests.conftest import CORPUS, NVSMI

SOURCES = [
    *sorted(p for p in NVSMI.iterdir() if p.suffix != ".md"),
    *sorted((CORPUS / "collect_env").glob("*.txt")),
]


@pytest.mark.parametrize("path", SOURCES, ids=[p.name for p in SOURCES])
def test_recorded_snapshots_round_trip(path):
    machine = readers.load(path)
    again = Machine.from_json(machine.to_json())
    assert again == machine


def test_live_snapshot_round_trips_and_is_frozen():
    machine = collect()
    assert machine.schema_version == SCHEMA_VERSION
    assert Machine.from_json(machine.to_json()) == machine
    with pytest.raises(dataclasses.FrozenInstanceError):
        machine.origin = None  # type: ignore[misc]


def test_from_dict_names_the_bad_field():
    document = json.loads(readers.load(NVSMI / "tesla-t4-2procs-q-x.xml").to_json())
    document["gpus"][0]["memory_total_bytes"] = "sixteen"
    with pytest.raises(ValueError, match=r"machine\.gpus\[0\]\.memory_total_bytes"):
        Machine.from_dict(document)
    document["gpus"][0]["memory_total_bytes"] = 1
    document["gpus"][0]["colour"] = "green"
    with pytest.raises(ValueError, match="unknown field 'colour'"):
        Machine.from_dict(document)


def test_other_schema_and_version_rejected():
    with pytest.raises(ValueError, match="not a dlrig machine snapshot"):
        Machine.from_dict({"schema": "something-else"})
    document = json.loads(readers.load(NVSMI / "rtx3090-q-x.xml").to_json())
    document["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="not supported"):
        Machine.from_dict(document)


def test_absent_sections_are_none_with_a_reason():
    machine = readers.load(NVSMI / "rtx3090-q-x.xml")
    assert machine.shm is None
    assert machine.issue_for("shm") == "not recorded in this nvidia-smi -q -x input"
    assert isinstance(machine.gpus[0], Gpu)

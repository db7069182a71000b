"""Pieces shared by the readers of recorded evidence."""

from __future__ import annotations

import json
from typing import Any

from dlrig.knowledge import gpus
from dlrig.machine.model import Driver, Gpu, Machine, Origin, ProbeIssue

# Top-level sections of a Machine, in report order.
SECTIONS: tuple[str, ...] = (
    "os",
    "cpu",
    "memory",
    "shm",
    "mounts",
    "network",
    "firewall",
    "containers",
    "driver",
    "gpus",
    "topology",
    "cuda_toolkit",
    "cudnn_system_libraries",
    "nccl",
    "frameworks",
    "kernel_log",
    "limits",
    "env",
)


def recorded_only_issues(input_kind: str, present: tuple[str, ...]) -> tuple[ProbeIssue, ...]:
    """One 'not in this input' note for every section a recorded input does not carry."""
    return tuple(
        ProbeIssue(section, f"not recorded in this {input_kind} input")
        for section in SECTIONS
        if section not in present
    )


def gpu_query_machine(
    kind: str,
    command: str,
    path: str | None,
    driver: Driver,
    gpus: tuple[Gpu, ...],
    collected_at: str | None = None,
    issues: tuple[ProbeIssue, ...] = (),
) -> Machine:
    """The Machine of one recorded nvidia-smi query: its driver and GPU sections, and a note
    for every other section that the output of `command` does not carry."""
    return Machine(
        origin=Origin(kind=kind, path=path, collected_at=collected_at, detail=command),
        driver=driver,
        gpus=gpus,
        probe_issues=issues + recorded_only_issues(command, ("driver", "gpus")),
    )


def catalogue_id_for(name: str | None) -> str | None:
    """The GPU catalogue id for a device name, or None when the catalogue does not know it."""
    if not name:
        return None
    spec = gpus.catalogue().resolve(name)
    return spec.id if spec else None


def parse_json(text: str) -> Any:
    """The document of a JSON input; ValueError with the parser's reason and line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"the JSON is malformed ({exc.msg} at line {exc.lineno})") from None

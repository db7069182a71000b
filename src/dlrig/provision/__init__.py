"""`dlrig provision`: the files that set a GPU machine up, generated from its facts.

    from dlrig import provision
    facts = provision.gather(None, provision.Stated(gpu="rtx-4090", os="ubuntu-24.04", torch="2.9"), probe=False)
    bundle = provision.generate("host", facts)
    for f in bundle.files: print(f.path, f.description)

One generator per target (host, env, docker, nccl, launch, power, monitor-k8s, health); each returns a
`Bundle` of files and the decisions behind them. Templates live in `templates/`.
"""

from __future__ import annotations

import importlib
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from dlrig.provision.facts import Stated, gather
from dlrig.provision.model import SCHEMA, SCHEMA_VERSION, Bundle, Decision, Facts, GeneratedFile
from dlrig.provision.output import write_bundle

if TYPE_CHECKING:  # each target's module is imported only when it runs
    from dlrig.provision.docker import DockerOptions
    from dlrig.provision.env import EnvOptions
    from dlrig.provision.health import HealthOptions
    from dlrig.provision.host import HostOptions
    from dlrig.provision.k8s import MonitorK8sOptions
    from dlrig.provision.launch import LaunchOptions
    from dlrig.provision.nccl import NcclOptions
    from dlrig.provision.power import PowerOptions

    TargetOptions: TypeAlias = (
        HostOptions
        | EnvOptions
        | DockerOptions
        | NcclOptions
        | LaunchOptions
        | PowerOptions
        | MonitorK8sOptions
        | HealthOptions
    )

TARGETS: dict[str, str] = {
    "host": "dlrig.provision.host",
    "env": "dlrig.provision.env",
    "docker": "dlrig.provision.docker",
    "nccl": "dlrig.provision.nccl",
    "launch": "dlrig.provision.launch",
    "power": "dlrig.provision.power",
    "monitor-k8s": "dlrig.provision.k8s",
    "health": "dlrig.provision.health",
}

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "TARGETS",
    "Bundle",
    "Decision",
    "Facts",
    "GeneratedFile",
    "Stated",
    "gather",
    "generate",
    "write",
]


def generate(target: str, facts: Facts, options: TargetOptions | None = None) -> Bundle:
    """Run one generator (its module is imported only now) with that target's options
    (`HostOptions` for "host", ...; None: its defaults)."""
    module = importlib.import_module(TARGETS[target])
    bundle: Bundle = (
        module.generate(facts, options) if options is not None else module.generate(facts)
    )
    if facts.gpu_note and facts.gpu is not None:
        # A short --gpu name ("h100") taken as one SKU: say so first, with the reason.
        taken = Decision("GPU model", facts.gpu.id, facts.gpu_note, facts.gpu_note_source)
        bundle = replace(bundle, decisions=(taken, *bundle.decisions))
    return bundle


def write(bundle: Bundle, out_dir: str | Path, overwrite: bool = False) -> Bundle:
    """Write the bundle's files under `out_dir` (atomically; an existing file only with
    `overwrite`); the bundle with the paths written."""
    return write_bundle(bundle, out_dir, overwrite)

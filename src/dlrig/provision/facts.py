"""Facts for the generators: from a live probe, a snapshot, or stated on the command line.

Stated facts win over probed ones, so `--machine box.json --torch 2.9` plans torch 2.9 for
that box whatever torch it has now.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlrig.errors import InputError
from dlrig.knowledge import cuda, gpus, pytorch
from dlrig.knowledge.provision import match_os_release, os_release
from dlrig.knowledge.tables import rows
from dlrig.knowledge.versions import build_variant, local_variant, minor_of
from dlrig.machine import probe as live
from dlrig.machine import readers
from dlrig.machine.model import Machine
from dlrig.provision.model import Facts


@dataclass(frozen=True)
class Stated:
    gpu: str | None = None  # catalogue id or alias
    gpu_count: int | None = None
    os: str | None = None
    torch: str | None = None
    cuda: str | None = None
    python: str | None = None
    driver: str | None = None


def _architecture(name: str | None, capability: str | None) -> str | None:
    """The GPU architecture: the catalogue's, else NVIDIA's name patterns, else by capability."""
    import re

    if name:
        spec = gpus.catalogue().resolve(name)
        if spec is not None and spec.architecture:
            return spec.architecture
        lowered = name.lower().replace("geforce", " ").replace("nvidia", " ")
        for row in rows("gpu_compute_capability"):
            if re.search(row["pattern"], lowered, re.I):
                return row["architecture"]
    if capability:
        for row in rows("gpu_compute_capability"):
            if row["compute_capability"] == capability:
                return row["architecture"]
    return None


_TORCH = re.compile(r"\d+\.\d+(\.\d+)?(\+[A-Za-z0-9.]+)?")
_PYTHON = re.compile(r"\d+\.\d+(\.\d+)?")
_DRIVER = re.compile(r"\d{3}\.\d{1,3}(\.\d{1,3})?")
_CUDA = re.compile(r"\d{1,2}\.\d(\.\d+)?")


def check_stated(stated: Stated) -> None:
    """One clear line for a stated fact that is not a value dlrig can use (exit 2)."""
    if stated.torch is not None:
        known = pytorch.releases()
        if not _TORCH.fullmatch(stated.torch.strip()):
            raise InputError(
                f"--torch {stated.torch}: not a torch release",
                fix="give a release such as --torch 2.9 or --torch 1.12.0+cu116",
            )
        if minor_of(stated.torch) not in known:
            raise InputError(
                f"--torch {stated.torch}: not a torch release in dlrig's tables ({known[0]} to {known[-1]})",
                fix=f"give one of {known[0]} ... {known[-1]}, e.g. --torch {known[-1]}",
            )
        variant = local_variant(stated.torch)
        if variant is not None and build_variant(stated.torch) is None:
            raise InputError(
                f"--torch {stated.torch}: +{variant} is not a wheel variant",
                fix="use a variant such as +cu118, +cu128 or +cpu, or leave it out",
            )
    if stated.python is not None:
        major = stated.python.split(".")[0]
        if not _PYTHON.fullmatch(stated.python.strip()) or major not in {"2", "3"}:
            raise InputError(
                f"--python {stated.python}: not a Python version",
                fix="give major.minor, e.g. --python 3.11",
            )
    if stated.driver is not None and not _DRIVER.fullmatch(stated.driver.strip()):
        raise InputError(
            f"--driver {stated.driver}: not an NVIDIA driver version",
            fix="give the version nvidia-smi prints, e.g. --driver 580.95.05",
        )
    if stated.cuda is not None:
        if not _CUDA.fullmatch(stated.cuda.strip()):
            raise InputError(
                f"--cuda {stated.cuda}: not a CUDA version",
                fix="give major.minor, e.g. --cuda 12.8",
            )
        if cuda.driver_requirement(stated.cuda.strip()) is None:
            raise InputError(
                f"--cuda {stated.cuda}: not a CUDA release in dlrig's tables",
                fix="give a released toolkit, e.g. --cuda 12.8 or --cuda 13.0",
            )


def from_machine(machine: Machine, origin: str) -> Facts:
    gpu_list = machine.gpus or ()
    name = gpu_list[0].name if gpu_list else None
    spec = gpus.catalogue().resolve(name) if name else None
    capability = gpu_list[0].compute_capability if gpu_list else None
    if capability is None and name:
        capability = gpus.compute_capability(name)[0]
    torch = (
        machine.frameworks.torch.version
        if machine.frameworks and machine.frameworks.torch
        else None
    )
    cuda = machine.cuda_toolkit.nvcc_version if machine.cuda_toolkit else None
    python = (machine.frameworks.python_version if machine.frameworks else None) or (
        machine.os.python_version if machine.os else None
    )
    return Facts(
        origin=origin,
        gpu=spec,
        gpu_name=name,
        gpu_count=len(gpu_list) if machine.gpus is not None else None,
        compute_capability=capability,
        architecture=_architecture(name, capability),
        os=match_os_release(machine.os.name) if machine.os and machine.os.name else None,
        driver_version=machine.driver.version if machine.driver else None,
        torch=torch,
        cuda=".".join(cuda.split(".")[:2]) if cuda else None,
        python=python,
        python_from="the snapshot's interpreter" if python else None,
        machine=machine,
    )


def apply_stated(facts: Facts, stated: Stated) -> Facts:
    from dataclasses import replace

    check_stated(stated)
    changes: dict[str, Any] = {}
    if stated.gpu:
        match = gpus.lookup(stated.gpu)
        spec = match.spec
        if spec.vendor != "nvidia":
            raise InputError(
                f"--gpu {stated.gpu}: dlrig provision writes NVIDIA stacks; {spec.name} is {spec.vendor}",
                fix="give an NVIDIA GPU model",
            )
        changes.update(
            gpu=spec,
            gpu_name=spec.name,
            compute_capability=spec.compute_capability,
            architecture=spec.architecture,
            gpu_note=match.note,
            gpu_note_source=match.source,
        )
        if facts.gpu_count is None and stated.gpu_count is None:
            changes["gpu_count"] = 1
    if stated.gpu_count is not None:
        changes["gpu_count"] = stated.gpu_count
    if stated.os:
        changes["os"] = os_release(stated.os)
    for name in ("torch", "cuda", "python"):
        value = getattr(stated, name)
        if value:
            changes[name] = value.strip()
    if stated.python:
        changes["python_from"] = "stated"
    if stated.driver:
        changes["driver_version"] = stated.driver.strip()
    if not changes:
        return facts
    fields = ("gpu", "gpu_count", "os", "torch", "cuda", "python", "driver")
    changes["stated"] = frozenset(n for n in fields if getattr(stated, n) not in (None, ""))
    origin = facts.origin if facts.origin != "stated facts" else "stated facts"
    if facts.machine is not None:
        origin = f"{facts.origin} with stated facts"
    return replace(facts, origin=origin, **changes)


def gather(
    machine_path: Path | None, stated: Stated, probe: bool, argv: tuple[str, ...] = ()
) -> Facts:
    """The facts for one run: a snapshot, a live probe (when asked) or nothing, then the
    stated facts on top."""
    from dataclasses import replace

    facts = Facts(origin="stated facts")
    if machine_path is not None:
        machine = readers.load(machine_path)
        host = machine.origin.hostname
        facts = from_machine(machine, f"snapshot {machine_path}" + (f" ({host})" if host else ""))
    elif probe:
        machine = live.collect()
        facts = from_machine(machine, f"live probe of {machine.origin.hostname or 'this machine'}")
    return replace(apply_stated(facts, stated), argv=argv)

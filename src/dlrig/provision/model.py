"""What every generator takes (Facts) and gives back (a Bundle of generated files)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlrig.report import envelope

if TYPE_CHECKING:
    from collections.abc import Iterable

    from dlrig.knowledge.gpus import GpuSpec
    from dlrig.knowledge.provision import OsRelease
    from dlrig.machine.model import Machine

SCHEMA = "dlrig.provision"
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Facts:
    """The machine a file is generated for: probed, read from a snapshot, or stated."""

    origin: str  # "live probe of gpu01" | "snapshot box.json (gpu01)" | "stated facts"
    gpu: GpuSpec | None = None
    gpu_name: str | None = None  # as nvidia-smi spells it, or the catalogue name
    gpu_count: int | None = None
    compute_capability: str | None = None
    architecture: str | None = None  # volta | ampere | hopper | ...
    os: OsRelease | None = None
    driver_version: str | None = None
    torch: str | None = None  # the torch release wanted (stated) or installed (snapshot)
    cuda: str | None = None  # the CUDA toolkit wanted on the host ("12.8")
    python: str | None = None  # "3.11"
    # Where `python` came from: "stated" (--python: a requirement) or the snapshot's own
    # interpreter (a preference only: a new environment may get another Python).
    python_from: str | None = None
    machine: Machine | None = None
    stated: frozenset[str] = frozenset()  # the facts given on the command line
    gpu_note: str | None = None  # how a short --gpu name was taken ("h100" -> h100-sxm5-80gb)
    gpu_note_source: str | None = None
    argv: tuple[str, ...] = ()  # the command line that made the files, for the header

    def summary(self) -> str:
        """One line for file headers: what the choices rest on."""
        parts = []
        if self.gpu_name:
            arch = ", ".join(
                p
                for p in (
                    self.architecture,
                    f"sm {self.compute_capability}" if self.compute_capability else None,
                )
                if p
            )
            count = f"{self.gpu_count}x " if self.gpu_count else ""
            parts.append(f"{count}{self.gpu_name}" + (f" ({arch})" if arch else ""))
        if self.os is not None:
            parts.append(self.os.name)
        versions = (
            ("driver", self.driver_version),
            ("torch", self.torch),
            ("CUDA", self.cuda),
            ("Python", self.python),
        )
        parts += [f"{name} {version}" for name, version in versions if version]
        return "; ".join(parts) or "no machine facts"

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "gpu": self.gpu.id if self.gpu else None,
            "gpu_name": self.gpu_name,
            "gpu_count": self.gpu_count,
            "compute_capability": self.compute_capability,
            "architecture": self.architecture,
            "os": self.os.id if self.os else None,
            "driver_version": self.driver_version,
            "torch": self.torch,
            "cuda": self.cuda,
            "python": self.python,
            "python_from": self.python_from,
        }


@dataclass(frozen=True)
class GeneratedFile:
    path: str  # relative to --out
    content: str
    kind: str  # shell | dockerfile | yaml | conf | requirements | systemd | text
    description: str
    executable: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "description": self.description,
            "executable": self.executable,
            "bytes": len(self.content.encode()),
        }


@dataclass(frozen=True)
class Decision:
    """A choice a generator made, why, and the table row it rests on."""

    what: str
    choice: str
    why: str
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"what": self.what, "choice": self.choice, "why": self.why, "source": self.source}


@dataclass(frozen=True)
class Bundle:
    target: str
    facts: Facts
    files: tuple[GeneratedFile, ...]
    decisions: tuple[Decision, ...] = ()
    warnings: tuple[str, ...] = ()
    written: tuple[str, ...] = field(default=())  # paths on disk once written

    @classmethod
    def of(
        cls,
        target: str,
        facts: Facts,
        files: Iterable[GeneratedFile],
        decisions: Iterable[Decision] = (),
        warnings: Iterable[str] = (),
    ) -> Bundle:
        """A generator's answer from the lists it built up as it went."""
        return cls(target, facts, tuple(files), tuple(decisions), tuple(warnings))

    def file(self, path: str) -> GeneratedFile:
        for generated in self.files:
            if generated.path == path:
                return generated
        raise KeyError(path)

    def to_dict(self) -> dict[str, Any]:
        files = []
        for index, generated in enumerate(self.files):
            entry = generated.to_dict()
            entry["written_to"] = self.written[index] if index < len(self.written) else None
            files.append(entry)
        return envelope(
            SCHEMA,
            SCHEMA_VERSION,
            {
                "target": self.target,
                "facts": self.facts.to_dict(),
                "files": files,
                "decisions": [d.to_dict() for d in self.decisions],
                "warnings": list(self.warnings),
            },
        )

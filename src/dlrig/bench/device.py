"""Which device the benchmarks run on, and what the catalogue says it should do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlrig.errors import InputError
from dlrig.extras import require
from dlrig.knowledge import gpus
from dlrig.knowledge.gpus import GpuSpec


def torch_module() -> Any:
    return require("torch", "torch", "dlrig bench")


@dataclass(frozen=True)
class BenchDevice:
    kind: str  # cuda | cpu
    index: int
    name: str
    spec: GpuSpec | None  # the catalogue's entry for a GPU, when it knows it
    compute_capability: tuple[int, int] | None = None
    uuid: str | None = None  # "GPU-…", as NVML spells it
    # A saved document's catalogue id where this dlrig's catalogue no longer has it: kept as
    # written (None: the spec's id, or no entry).
    catalogue_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """What a bench document says of the device: kind, index, name, catalogue id."""
        return {
            "kind": self.kind,
            "index": self.index,
            "name": self.name,
            "catalogue_id": self.spec.id if self.spec else self.catalogue_id,
        }

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> BenchDevice:
        """The device of a saved bench document (its catalogue entry looked up again)."""
        kind, index, name = document.get("kind"), document.get("index"), document.get("name")
        if kind not in ("cuda", "cpu") or not isinstance(index, int) or not isinstance(name, str):
            raise ValueError("bench device: needs kind (cuda or cpu), an integer index and a name")
        catalogue_id = document.get("catalogue_id")
        written = catalogue_id if isinstance(catalogue_id, str) else None
        spec = gpus.catalogue().get(written) if written else None
        return cls(kind, index, name, spec, catalogue_id=None if spec else written)

    @property
    def torch_device(self) -> str:
        return f"cuda:{self.index}" if self.kind == "cuda" else "cpu"

    def synchronize(self) -> None:
        if self.kind == "cuda":
            torch_module().cuda.synchronize(self.index)


def pick(requested: str = "auto", index: int = 0) -> BenchDevice:
    """The GPU `index` when CUDA works (or `requested` is "cuda"), else the CPU."""
    if requested not in ("auto", "cuda", "cpu"):
        raise InputError(f"--device {requested!r} is not auto, cuda or cpu", fix="pick one")
    torch = torch_module()
    cuda = requested != "cpu" and torch.cuda.is_available()
    if requested == "cuda" and not cuda:
        raise InputError(
            "--device cuda: torch cannot use a GPU here",
            fix="run `dlrig doctor` to see why, or drop --device to measure the CPU",
        )
    if not cuda:
        import platform

        return BenchDevice("cpu", 0, platform.processor() or platform.machine(), None)
    if not 0 <= index < torch.cuda.device_count():
        raise InputError(
            f"--gpu-index {index}: this machine has {torch.cuda.device_count()} GPU(s)",
            fix="give an index from 0",
        )
    name = torch.cuda.get_device_name(index)
    # A MIG slice has a share of the GPU's SMs and bandwidth: the whole GPU's peaks do not
    # apply, so it is measured without an expectation.
    spec = None if " MIG " in f" {name} " else gpus.catalogue().resolve(name)
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return BenchDevice(
        "cuda",
        index,
        name,
        spec,
        tuple(torch.cuda.get_device_capability(index)),
        uuid=f"GPU-{uuid}" if uuid is not None and not str(uuid).startswith("GPU-") else uuid,
    )

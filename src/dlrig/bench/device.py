"""Which device the benchmarks run on, and what the catalogue says it should do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlrig.errors import InputError
from dlrig.extras import require
from dlrig.knowledge import gpus
from dlrig.knowledge.gpus import GpuSpec
from dlrig.machine.readers import values


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
    # torch's HIP build drives AMD GPUs through the same torch.cuda API: "rocm" there, with
    # the GPU's gfx target (gcnArchName, "gfx942:sramecc+:xnack-") and the build's HIP
    # version in place of a compute capability, which HIP fills with the ISA's digits.
    platform: str = "cuda"  # cuda | rocm (for kind "cuda")
    gfx_target: str | None = None
    hip_version: str | None = None
    pci_bus_id: str | None = None  # "0000:83:00.0", to find the GPU in a snapshot without UUIDs

    def to_dict(self) -> dict[str, Any]:
        """What a bench document says of the device: kind, index, name, catalogue id."""
        written: dict[str, Any] = {
            "kind": self.kind,
            "index": self.index,
            "name": self.name,
            "catalogue_id": self.spec.id if self.spec else self.catalogue_id,
        }
        if self.platform == "rocm":
            written.update(platform="rocm", gfx_target=self.gfx_target, hip=self.hip_version)
        return written

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> BenchDevice:
        """The device of a saved bench document (its catalogue entry looked up again)."""
        kind, index, name = document.get("kind"), document.get("index"), document.get("name")
        if kind not in ("cuda", "cpu") or not isinstance(index, int) or not isinstance(name, str):
            raise ValueError("bench device: needs kind (cuda or cpu), an integer index and a name")
        catalogue_id = document.get("catalogue_id")
        written = catalogue_id if isinstance(catalogue_id, str) else None
        spec = gpus.catalogue().get(written) if written else None
        rocm = document.get("platform") == "rocm"
        gfx, hip = document.get("gfx_target"), document.get("hip")
        return cls(
            kind,
            index,
            name,
            spec,
            catalogue_id=None if spec else written,
            platform="rocm" if rocm else "cuda",
            gfx_target=gfx if rocm and isinstance(gfx, str) else None,
            hip_version=hip if rocm and isinstance(hip, str) else None,
        )

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
    properties = torch.cuda.get_device_properties(index)
    hip = getattr(torch.version, "hip", None)
    if hip:
        return BenchDevice(
            "cuda",
            index,
            name,
            spec,
            None,
            uuid=None,  # HIP's UUID is not the one rocm-smi or amd-smi print
            platform="rocm",
            gfx_target=getattr(properties, "gcnArchName", None) or None,
            hip_version=str(hip),
            pci_bus_id=_pci_address(properties),
        )
    uuid = getattr(properties, "uuid", None)
    return BenchDevice(
        "cuda",
        index,
        name,
        spec,
        tuple(torch.cuda.get_device_capability(index)),
        uuid=f"GPU-{uuid}" if uuid is not None and not str(uuid).startswith("GPU-") else uuid,
        pci_bus_id=_pci_address(properties),
    )


def _pci_address(properties: Any) -> str | None:
    """ "domain:bus:device.0" from torch's device properties (torch >= 2.5 has the three
    numbers; older builds do not)."""
    domain, bus, device = (
        getattr(properties, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")
    )
    if not all(isinstance(number, int) for number in (domain, bus, device)):
        return None
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


def same_pci_address(first: str | None, second: str | None) -> bool:
    """Whether two PCI addresses name one device, however their domain is written."""
    return values.pci_address(first) is not None and values.pci_address(
        first
    ) == values.pci_address(second)

"""The machine snapshot: one frozen, JSON round-trippable description of a machine.

Every section is optional. `None` means "not known": the probe could not run (the reason is in
`Machine.probe_issues`) or the recorded evidence the snapshot came from does not contain it (an
`nvidia-smi -q -x` file says nothing about /dev/shm). Checks treat None as "skip", never as a
failure. Units are in the field names; human formatting happens only in renderers.

The accelerator sections (driver, GPUs, ROCm, Gaudi, topology) live in `model_gpu` and are
re-exported here, so `from dlrig.machine.model import Gpu` stays the one import.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any, TypeVar

from dlrig.machine.model_gpu import (
    Driver as Driver,
)
from dlrig.machine.model_gpu import (
    EccCounts as EccCounts,
)
from dlrig.machine.model_gpu import (
    Gaudi as Gaudi,
)
from dlrig.machine.model_gpu import (
    Gpu as Gpu,
)
from dlrig.machine.model_gpu import (
    GpuProcess as GpuProcess,
)
from dlrig.machine.model_gpu import (
    MigDevice as MigDevice,
)
from dlrig.machine.model_gpu import (
    PcieLink as PcieLink,
)
from dlrig.machine.model_gpu import (
    RemappedRows as RemappedRows,
)
from dlrig.machine.model_gpu import (
    RetiredPages as RetiredPages,
)
from dlrig.machine.model_gpu import (
    Rocm as Rocm,
)
from dlrig.machine.model_gpu import (
    Topology as Topology,
)
from dlrig.plain import from_plain as _from_plain
from dlrig.plain import to_plain as _to_plain

SCHEMA_VERSION = 1
SCHEMA_NAME = "dlrig.machine"


@dataclass(frozen=True)
class ProbeIssue:
    """A probe that could not run or an input that lacks a section, and why."""

    source: str
    reason: str


@dataclass(frozen=True)
class Origin:
    """Where the snapshot came from."""

    kind: str  # live | snapshot | nvidia-smi-xml | nvidia-smi-capture | collect-env | kernel-log
    path: str | None = None
    collected_at: str | None = None  # ISO 8601 UTC
    hostname: str | None = None
    detail: str | None = None
    # /proc/sys/kernel/random/boot_id of a live probe: tells one boot from the next (the kernel
    # log and the GPUs' error counters start again at each boot).
    boot_id: str | None = None


@dataclass(frozen=True)
class OsInfo:
    name: str | None = None  # PRETTY_NAME of /etc/os-release
    kernel_release: str | None = None
    glibc_version: str | None = None
    architecture: str | None = None
    python_version: str | None = None


@dataclass(frozen=True)
class CpuInfo:
    model: str | None = None
    sockets: int | None = None
    cores: int | None = None  # physical cores, all sockets
    threads: int | None = None  # logical CPUs
    l3_cache_bytes: int | None = None  # per socket
    numa_nodes: int | None = None
    governor: str | None = None  # cpufreq scaling governor of cpu0
    deepest_enabled_cstate: str | None = None  # e.g. "C6"; None where cpuidle is not visible
    deepest_enabled_cstate_exit_latency_us: int | None = None


@dataclass(frozen=True)
class MemoryInfo:
    total_bytes: int | None = None
    available_bytes: int | None = None
    swap_total_bytes: int | None = None
    ecc_visible: bool | None = None  # EDAC memory controllers are registered
    ecc_corrected_errors: int | None = None
    ecc_uncorrected_errors: int | None = None


@dataclass(frozen=True)
class SharedMemory:
    path: str = "/dev/shm"
    total_bytes: int | None = None
    free_bytes: int | None = None


@dataclass(frozen=True)
class Mount:
    mountpoint: str
    device: str
    fstype: str
    media: str  # nvme | ssd | hdd | virtual | network | memory | unknown
    total_bytes: int | None = None
    free_bytes: int | None = None
    rotational: bool | None = None


@dataclass(frozen=True)
class NetInterface:
    name: str
    kind: str  # ethernet | infiniband | loopback | bridge | virtual | other
    operstate: str | None = None  # up | down | unknown
    speed_mbps: int | None = None
    ipv4: tuple[str, ...] = ()
    rdma_device: str | None = None  # mlx5_0 when the port is an RDMA device
    rdma_link_layer: str | None = None  # InfiniBand | Ethernet (RoCE)


@dataclass(frozen=True)
class Firewall:
    active: bool | None = None
    tool: str | None = None  # ufw | firewalld | nftables | iptables
    detail: str | None = None


@dataclass(frozen=True)
class Containers:
    in_container: bool | None = None
    container_kind: str | None = None  # docker | podman | kubernetes | lxc | other
    docker_installed: bool | None = None
    docker_is_snap: bool | None = None
    nvidia_container_toolkit: bool | None = None  # nvidia-ctk / nvidia-container-cli present
    docker_nvidia_runtime_configured: bool | None = None  # "nvidia" runtime in daemon.json


@dataclass(frozen=True)
class CudaToolkit:
    nvcc_path: str | None = None
    nvcc_version: str | None = None  # "12.4.131"
    cuda_home: str | None = None


@dataclass(frozen=True)
class LibraryFile:
    path: str
    version: str | None = None


@dataclass(frozen=True)
class Nccl:
    system_libraries: tuple[LibraryFile, ...] = ()
    conf_files: tuple[str, ...] = ()  # which nccl.conf files exist
    conf: tuple[tuple[str, str], ...] = ()  # settings from those files, in order
    env: tuple[tuple[str, str], ...] = ()  # NCCL_* from the environment


@dataclass(frozen=True)
class TorchInfo:
    version: str
    build: str | None = None  # cuda | rocm | cpu; None = unknown
    cuda_version: str | None = None  # torch.version.cuda; None for CPU and ROCm builds
    hip_version: str | None = None
    cudnn_version: str | None = None
    nccl_version: str | None = None
    arch_list: tuple[str, ...] | None = None  # ("sm_80", "sm_90", "compute_90"); None = unknown
    cuda_available: bool | None = None  # None = not tested (doctor never initialises CUDA)
    location: str | None = None
    installer: str | None = None  # pip | conda | system | unknown
    # A torch without CUDA on a machine where the report's tool still found CUDA parts (nvcc,
    # an NVIDIA GPU or driver): collect_env's 'CUDA used to build PyTorch: Could not collect'.
    cuda_parts_found: bool | None = None


@dataclass(frozen=True)
class PackageInfo:
    name: str
    version: str
    location: str | None = None
    installer: str | None = None
    build: str | None = None  # framework-specific build flavour, e.g. "cuda-12.3" for TensorFlow


@dataclass(frozen=True)
class DuplicateInstall:
    name: str
    versions: tuple[str, ...]
    locations: tuple[str, ...]


@dataclass(frozen=True)
class Frameworks:
    python_executable: str | None = None
    python_version: str | None = None
    torch: TorchInfo | None = None
    torchvision: PackageInfo | None = None
    torchaudio: PackageInfo | None = None
    tensorflow: PackageInfo | None = None
    jax: PackageInfo | None = None
    jaxlib: PackageInfo | None = None
    jax_cuda_plugin: PackageInfo | None = None
    duplicates: tuple[DuplicateInstall, ...] = ()
    packages: tuple[tuple[str, str], ...] = ()  # other relevant (name, version) pairs


@dataclass(frozen=True)
class XidEvent:
    code: int
    pci_bus_id: str | None = None
    message: str | None = None
    timestamp: str | None = None
    process_name: str | None = None
    pid: int | None = None


@dataclass(frozen=True)
class KernelLog:
    xid_events: tuple[XidEvent, ...] = ()
    source: str | None = None  # dmesg | journalctl | file


@dataclass(frozen=True)
class Limits:
    open_files_soft: int | None = None
    open_files_hard: int | None = None


@dataclass(frozen=True)
class Machine:
    """A machine at one moment: what the checks, estimators and reports stand on."""

    origin: Origin
    os: OsInfo | None = None
    cpu: CpuInfo | None = None
    memory: MemoryInfo | None = None
    shm: SharedMemory | None = None
    mounts: tuple[Mount, ...] | None = None
    network: tuple[NetInterface, ...] | None = None
    firewall: Firewall | None = None
    containers: Containers | None = None
    driver: Driver | None = None
    gpus: tuple[Gpu, ...] | None = None
    rocm: Rocm | None = None  # AMD machines: the ROCm stack and device access
    gaudi: Gaudi | None = None  # Intel Gaudi machines
    topology: Topology | None = None
    cuda_toolkit: CudaToolkit | None = None
    cudnn_system_libraries: tuple[LibraryFile, ...] | None = None
    nccl: Nccl | None = None
    frameworks: Frameworks | None = None
    kernel_log: KernelLog | None = None
    limits: Limits | None = None
    env: tuple[tuple[str, str], ...] | None = None  # relevant variables, secrets filtered
    probe_issues: tuple[ProbeIssue, ...] = ()
    schema_version: int = SCHEMA_VERSION

    def env_value(self, name: str) -> str | None:
        """The value of an environment variable recorded in the snapshot, if any."""
        for key, value in self.env or ():
            if key == name:
                return value
        return None

    def issue_for(self, source: str) -> str | None:
        """Why a section is missing, if a probe recorded it."""
        for issue in self.probe_issues:
            if issue.source == source:
                return issue.reason
        return None

    def to_dict(self) -> dict[str, Any]:
        document = {"schema": SCHEMA_NAME}
        document.update(_to_plain(self))
        return document

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False)

    @classmethod
    def from_dict(cls, document: dict[str, Any], strict: bool = True) -> Machine:
        """Rebuild a snapshot; raises ValueError naming the first field that does not fit
        (`strict=False`: a field this dlrig does not know is dropped, for reports of documents
        a newer dlrig wrote)."""
        if document.get("schema") != SCHEMA_NAME:
            raise ValueError(f"not a dlrig machine snapshot (schema is {document.get('schema')!r})")
        version = document.get("schema_version")
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"snapshot schema_version {version!r} is not supported (this dlrig reads "
                f"{SCHEMA_VERSION})"
            )
        body = {key: value for key, value in document.items() if key != "schema"}
        machine: Machine = _from_plain(cls, body, "machine", strict)
        return machine

    @classmethod
    def from_json(cls, text: str) -> Machine:
        return cls.from_dict(json.loads(text))


T = TypeVar("T")


def replace(obj: T, **changes: Any) -> T:
    """dataclasses.replace with a type the checker follows."""
    return dataclasses.replace(obj, **changes)  # type: ignore[type-var]

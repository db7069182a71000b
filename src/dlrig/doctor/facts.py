"""Facts derived from a snapshot that several checks share (still pure functions)."""

from __future__ import annotations

import re

from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge import gpus as gpu_knowledge
from dlrig.knowledge.versions import Version, local_variant
from dlrig.machine.model import Gpu, Machine, TorchInfo


def nvidia_gpus(machine: Machine) -> tuple[Gpu, ...] | None:
    """The NVIDIA GPUs of the snapshot (an AMD or Gaudi recording lists others); None when the
    snapshot does not say."""
    if machine.gpus is None:
        return None
    return tuple(g for g in machine.gpus if g.is_nvidia)


def nvidia_gpu_count(machine: Machine) -> int | None:
    """GPUs known to be present (from NVML/nvidia-smi, else the PCI bus); None if unknown."""
    gpus = nvidia_gpus(machine)
    if gpus:
        return len(gpus)
    if machine.driver is not None and machine.driver.nvidia_pci_devices is not None:
        return machine.driver.nvidia_pci_devices
    if gpus is not None:
        return 0
    return None


def has_nvidia_gpu(machine: Machine) -> bool | None:
    count = nvidia_gpu_count(machine)
    return None if count is None else count > 0


# Packages that only make sense next to an NVIDIA GPU: conda's CUDA runtime and PyTorch's
# CUDA meta-package, and the nvidia-*-cu11/cu12/cu13 wheels pip pulls in for CUDA builds.
_CUDA_PACKAGE = re.compile(
    r"^(cudatoolkit|pytorch-cuda|cuda-runtime|cuda-toolkit|nvidia-\S+-cu\d+)$"
)


def gpu_expected(machine: Machine) -> tuple[tuple[str, ...], bool]:
    """Why this environment looks meant for an NVIDIA GPU, and whether that is proven.

    Proven: a GPU, an NVIDIA PCI device or a driver version is recorded. Suggested: a CUDA
    toolkit (nvcc), cuDNN libraries or CUDA packages are installed, which nobody installs for a
    CPU-only machine; a paste cut before its GPU lines still shows these.
    """
    proven = []
    listed = nvidia_gpus(machine)
    if listed:
        proven.append(f"{len(listed)} NVIDIA GPU(s) listed ({listed[0].name})")
    driver = machine.driver
    if driver is not None and driver.nvidia_pci_devices:
        proven.append(f"{driver.nvidia_pci_devices} NVIDIA device(s) on the PCI bus")
    if driver is not None and driver.version:
        proven.append(f"NVIDIA driver {driver.version}")
    suggested = []
    info = torch(machine)
    if info is not None and info.cuda_parts_found:
        suggested.append(
            "collect_env printed 'CUDA used to build PyTorch: Could not collect', which it "
            "prints for a torch without CUDA only when it found nvcc, an NVIDIA GPU or a driver"
        )
    toolkit = machine.cuda_toolkit
    if toolkit is not None and toolkit.nvcc_version:
        suggested.append(f"CUDA toolkit {toolkit.nvcc_version} installed (nvcc)")
    if machine.cudnn_system_libraries:
        suggested.append("cuDNN libraries installed")
    packages = machine.frameworks.packages if machine.frameworks else ()
    cuda_packages = sorted({name for name, _ in packages if _CUDA_PACKAGE.match(name)})
    if cuda_packages:
        suggested.append("CUDA packages installed: " + ", ".join(cuda_packages[:4]))
    return tuple(proven + suggested), bool(proven)


def driver_on_windows(machine: Machine) -> bool:
    """The NVIDIA driver is a Windows one: Windows itself, or WSL2, whose Linux kernel
    ('...-microsoft-standard-WSL2') reaches the GPU through the Windows host's driver."""
    os_info = machine.os
    if os_info is None:
        return False
    if "windows" in (os_info.name or "").lower():
        return True
    return "microsoft" in (os_info.kernel_release or "").lower()


def driver_cuda(machine: Machine) -> tuple[str | None, bool]:
    """The newest CUDA the driver runs, and whether it was derived from the driver's version
    (NVIDIA's Table 3) rather than reported (nvidia-smi's "CUDA Version")."""
    d = machine.driver
    if d is None:
        return None, False
    if d.cuda_version:
        return d.cuda_version, False
    if d.version:
        derived = cuda_knowledge.max_cuda_for_driver(d.version, windows=driver_on_windows(machine))
        return derived, derived is not None
    return None, False


def driver_cuda_text(machine: Machine) -> str:
    """ "CUDA ≤ 12.2" (reported) / "CUDA ≤ 12.2 per NVIDIA's table" (derived) / ""."""
    cuda, derived = driver_cuda(machine)
    if cuda is None:
        return ""
    return f"CUDA ≤ {cuda}" + (" per NVIDIA's table" if derived else "")


def is_macos(machine: Machine) -> bool:
    name = (machine.os.name or "").lower() if machine.os else ""
    return "mac" in name or "darwin" in name


def capability(gpu: Gpu) -> tuple[str | None, str]:
    """Compute capability of a GPU and where the number comes from."""
    if gpu.compute_capability:
        return gpu.compute_capability, "reported by the driver"
    value, source = gpu_knowledge.compute_capability(gpu.name)
    return value, source or "unknown"


def sm(capability_text: str) -> str:
    """ "8.6" -> "sm_86"."""
    version = Version.parse(capability_text)
    if version is None:
        return capability_text
    return f"sm_{version.major}{version.minor}"


def torch(machine: Machine) -> TorchInfo | None:
    return machine.frameworks.torch if machine.frameworks else None


def absent(machine: Machine, framework: str) -> str:
    """Why a framework's check is skipped, as the snapshot shows it: a recorded snapshot without
    the Python environment's facts does not say the framework is missing."""
    if machine.frameworks is None:
        return f"{framework} not in this snapshot (no Python environment was inspected)"
    return f"{framework} is not installed"


def torch_cuda(machine: Machine) -> str | None:
    """The CUDA version torch was built for ("12.1"), None for CPU/ROCm builds or unknown."""
    info = torch(machine)
    if info is None:
        return None
    if info.cuda_version:
        return info.cuda_version
    variant = local_variant(info.version)
    if variant and variant.startswith("cu") and variant[2:].isdigit():
        digits = variant[2:]
        return f"{digits[:-1]}.{digits[-1]}"
    return None


def torch_is_cpu_only(info: TorchInfo) -> bool | None:
    variant = local_variant(info.version)
    if variant == "cpu" or info.build == "cpu":
        return True
    if info.build in {"cuda", "rocm"} or info.cuda_version or info.hip_version:
        return False
    if variant and (variant.startswith("cu") or variant.startswith("rocm")):
        return False
    return None


def busy(gpu: Gpu, threshold_percent: float) -> bool | None:
    """Whether any engine works: the SMs, or the video encoder/decoder."""
    activity = gpu.busiest_engine_percent
    return None if activity is None else activity >= threshold_percent


def gpu_label(gpu: Gpu) -> str:
    return f"GPU {gpu.index} ({gpu.name})"


def total_gpu_memory_bytes(machine: Machine) -> int | None:
    if not machine.gpus:
        return None
    sizes = [g.memory_total_bytes for g in machine.gpus]
    if any(size is None for size in sizes):
        return None
    return sum(size for size in sizes if size is not None)


def multi_node_configured(machine: Machine) -> str | None:
    """Why this machine looks set up for multi-node training, or None."""
    master = machine.env_value("MASTER_ADDR")
    if master and master not in {"localhost", "127.0.0.1", "::1", machine.origin.hostname}:
        return f"MASTER_ADDR={master}"
    for name in ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"):
        value = machine.env_value(name)
        if value and value.isdigit() and int(value) > 1:
            return f"{name}={value}"
    world = machine.env_value("WORLD_SIZE")
    count = nvidia_gpu_count(machine)
    if world and world.isdigit() and count and int(world) > count:
        return f"WORLD_SIZE={world} > {count} local GPUs"
    return None


def smi_command(gpus: tuple[Gpu, ...] | list[Gpu]) -> str:
    """The vendor tool that shows these GPUs: nvidia-smi, rocm-smi or hl-smi."""
    vendors = {g.vendor for g in gpus}
    if vendors == {"amd"}:
        return "rocm-smi"
    if vendors == {"intel-gaudi"}:
        return "hl-smi"
    return "nvidia-smi"

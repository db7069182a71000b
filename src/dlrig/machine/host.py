"""Host facts from procfs/sysfs: OS, CPU, memory, /dev/shm, limits, relevant environment."""

from __future__ import annotations

import os
import platform
import re
import resource

from dlrig.machine.model import CpuInfo, Limits, MemoryInfo, OsInfo, SharedMemory
from dlrig.machine.runner import ProbeContext

_ENV_PREFIXES = (
    # AMD: HSA_OVERRIDE_GFX_VERSION, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES, ROCM_PATH.
    "HSA_",
    "HIP_",
    "ROCR_",
    "ROCM_",
    "CUDA_",
    "NCCL_",
    "PYTORCH_",
    "TORCH_",
    "NVIDIA_",
    "CUBLAS_",
    "CUDNN_",
    "OMP_",
    "MKL_",
    "GLOO_",
    "SLURM_",
    "TF_",
    "XLA_",
    "JAX_",
    "HF_",
    "DS_",
)
_ENV_NAMES = {
    "LD_LIBRARY_PATH",
    "MASTER_ADDR",
    "MASTER_PORT",
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "NODE_RANK",
    "TMPDIR",
    "KUBERNETES_SERVICE_HOST",
    "CONDA_PREFIX",
    "VIRTUAL_ENV",
}
# Never copy credentials into a snapshot that users attach to bug reports.
_SECRET_WORDS = ("SECRET", "TOKEN", "PASSWORD", "PASSWD", "API_KEY", "ACCESS_KEY", "CREDENTIAL")


def relevant_env(env: dict[str, str] | os._Environ[str]) -> tuple[tuple[str, str], ...]:
    kept = []
    for key in sorted(env):
        if any(word in key.upper() for word in _SECRET_WORDS):
            continue
        if key in _ENV_NAMES or key.startswith(_ENV_PREFIXES):
            kept.append((key, env[key]))
    return tuple(kept)


def os_info(ctx: ProbeContext) -> OsInfo:
    release = ctx.read("/etc/os-release") or ""
    pretty = re.search(r'^PRETTY_NAME="?([^"\n]+)"?', release, re.M)
    kernel = (ctx.read("/proc/sys/kernel/osrelease") or "").strip() or None
    libc_name, libc_version = platform.libc_ver()
    return OsInfo(
        name=pretty.group(1) if pretty else None,
        kernel_release=kernel,
        glibc_version=libc_version if libc_name == "glibc" and libc_version else None,
        architecture=platform.machine() or None,
        python_version=platform.python_version(),
    )


def _size_with_unit(text: str) -> int | None:
    match = re.match(r"\s*(\d+)\s*([KMG]?)", text)
    if not match:
        return None
    scale = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[match.group(2)]
    return int(match.group(1)) * scale


def cpu_info(ctx: ProbeContext) -> CpuInfo:
    cpuinfo = ctx.read("/proc/cpuinfo") or ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    if model is None:
        model = re.search(r"^(?:Model|Hardware|cpu model)\s*:\s*(.+)$", cpuinfo, re.M)
    cpu_root = ctx.path("/sys/devices/system/cpu")
    packages: set[str] = set()
    cores: set[tuple[str, str]] = set()
    threads = 0
    for cpu_dir in sorted(cpu_root.glob("cpu[0-9]*")):
        topology = cpu_dir / "topology"
        if not topology.is_dir():
            continue
        threads += 1
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            continue
        packages.add(package)
        cores.add((package, core))
    if threads == 0:
        threads = len(re.findall(r"^processor\s*:", cpuinfo, re.M))
    l3 = None
    for index in sorted(cpu_root.glob("cpu0/cache/index*")):
        try:
            if (index / "level").read_text().strip() == "3":
                l3 = _size_with_unit((index / "size").read_text())
        except OSError:
            continue
    numa = len(list(ctx.path("/sys/devices/system/node").glob("node[0-9]*"))) or None
    governor = ctx.read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    deepest, latency = _deepest_cstate(ctx)
    return CpuInfo(
        model=model.group(1).strip() if model else None,
        sockets=len(packages) or None,
        cores=len(cores) or None,
        threads=threads or None,
        l3_cache_bytes=l3,
        numa_nodes=numa,
        governor=governor.strip() if governor else None,
        deepest_enabled_cstate=deepest,
        deepest_enabled_cstate_exit_latency_us=latency,
    )


def _deepest_cstate(ctx: ProbeContext) -> tuple[str | None, int | None]:
    """The enabled idle state of cpu0 with the longest exit latency."""
    best: tuple[str | None, int | None] = (None, None)
    for state in sorted(ctx.path("/sys/devices/system/cpu/cpu0/cpuidle").glob("state[0-9]*")):
        try:
            if (state / "disable").read_text().strip() == "1":
                continue
            name = (state / "name").read_text().strip()
            latency = int((state / "latency").read_text().strip())
        except (OSError, ValueError):
            continue
        if best[1] is None or latency > best[1]:
            best = (name, latency)
    return best


def memory_info(ctx: ProbeContext) -> MemoryInfo:
    meminfo = ctx.read("/proc/meminfo") or ""

    def kib(field: str) -> int | None:
        match = re.search(rf"^{field}:\s+(\d+)\s*kB", meminfo, re.M)
        return int(match.group(1)) * 1024 if match else None

    edac = ctx.path("/sys/devices/system/edac/mc")
    controllers = sorted(edac.glob("mc[0-9]*")) if edac.is_dir() else []
    corrected = uncorrected = None
    for controller in controllers:
        try:
            corrected = (corrected or 0) + int((controller / "ce_count").read_text())
            uncorrected = (uncorrected or 0) + int((controller / "ue_count").read_text())
        except (OSError, ValueError):
            continue
    return MemoryInfo(
        total_bytes=kib("MemTotal"),
        available_bytes=kib("MemAvailable"),
        swap_total_bytes=kib("SwapTotal"),
        ecc_visible=bool(controllers) if edac.exists() else None,
        ecc_corrected_errors=corrected,
        ecc_uncorrected_errors=uncorrected,
    )


def shared_memory(ctx: ProbeContext) -> SharedMemory:
    path = ctx.path("/dev/shm")
    try:
        stats = os.statvfs(path)
    except OSError:
        return SharedMemory(total_bytes=None, free_bytes=None)
    return SharedMemory(
        total_bytes=stats.f_blocks * stats.f_frsize,
        free_bytes=stats.f_bavail * stats.f_frsize,
    )


def limits() -> Limits:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    infinity = resource.RLIM_INFINITY
    return Limits(
        open_files_soft=None if soft == infinity else soft,
        open_files_hard=None if hard == infinity else hard,
    )

"""The accelerators of a machine snapshot: the NVIDIA driver, each GPU (any vendor) with its
readings, AMD's and Intel Gaudi's software stacks, and the GPU topology.

Part of the snapshot of `dlrig.machine.model`, which re-exports every name here; the same rules
hold (None is "not known", units in the field names).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Driver:
    version: str | None = None  # user-space driver (NVML) version, "535.54.03"
    cuda_version: str | None = None  # newest CUDA the driver supports, "12.2"
    kernel_module_version: str | None = None  # /proc/driver/nvidia/version
    nvml_error: str | None = None  # NVML initialisation failure text, verbatim
    nvidia_pci_devices: int | None = None  # NVIDIA display/3D controllers on the PCI bus
    nvidia_pci_devices_with_driver: int | None = None  # of those, bound to the nvidia driver
    kernel_module_loaded: bool | None = None


@dataclass(frozen=True)
class PcieLink:
    gen_current: int | None = None
    gen_max: int | None = None  # the link's max: min(GPU max, host max) when both are known
    width_current: int | None = None
    width_max: int | None = None


@dataclass(frozen=True)
class EccCounts:
    volatile_corrected: int | None = None
    volatile_uncorrected: int | None = None
    aggregate_corrected: int | None = None
    aggregate_uncorrected: int | None = None


@dataclass(frozen=True)
class RetiredPages:
    single_bit: int | None = None
    double_bit: int | None = None
    pending: bool | None = None


@dataclass(frozen=True)
class RemappedRows:
    correctable: int | None = None
    uncorrectable: int | None = None
    pending: bool | None = None
    failure: bool | None = None


@dataclass(frozen=True)
class MigDevice:
    index: int
    profile: str | None = None  # "3g.40gb"
    gpu_instance_id: int | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    sm_count: int | None = None


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str | None = None
    kind: str | None = None  # C | G | C+G
    used_memory_bytes: int | None = None
    container_id: str | None = None  # docker/containerd/podman id from /proc/<pid>/cgroup
    kubernetes_pod_uid: str | None = None
    # Under MIG: the GPU and compute instance the process runs in.
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    # NVML's per-process utilisation samples (the most recent one): SMs, encoder, decoder.
    sm_percent: float | None = None
    encoder_percent: float | None = None
    decoder_percent: float | None = None


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    # Who made it: "nvidia", "amd" or "intel-gaudi". None is NVIDIA: the NVIDIA readers and
    # snapshots written before other vendors were read leave it unset.
    vendor: str | None = None
    gfx_target: str | None = None  # AMD: the ISA the ROCm wheel must contain, "gfx90a"
    uuid: str | None = None
    pci_bus_id: str | None = None  # "00000000:83:00.0"
    catalogue_id: str | None = None  # resolved from the GPU catalogue where known
    serial: str | None = None
    vbios_version: str | None = None
    memory_total_bytes: int | None = None
    memory_used_bytes: int | None = None
    compute_capability: str | None = None  # "9.0"
    pcie: PcieLink = field(default_factory=PcieLink)
    persistence_mode: bool | None = None
    performance_state: str | None = None  # "P0"
    power_draw_watts: float | None = None
    power_limit_watts: float | None = None
    power_default_limit_watts: float | None = None
    temperature_c: float | None = None
    temperature_slowdown_c: float | None = None
    clocks_event_reasons: tuple[str, ...] | None = None  # active reasons, snake_case names
    ecc_mode_enabled: bool | None = None
    ecc_mode_pending: bool | None = None
    ecc_errors: EccCounts = field(default_factory=EccCounts)
    retired_pages: RetiredPages = field(default_factory=RetiredPages)
    remapped_rows: RemappedRows = field(default_factory=RemappedRows)
    mig_mode_enabled: bool | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    utilization_gpu_percent: float | None = None
    utilization_memory_percent: float | None = None
    # The video engines (NVENC/NVDEC): busy while the SMs idle when a job only encodes or decodes.
    utilization_encoder_percent: float | None = None
    utilization_decoder_percent: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    processes: tuple[GpuProcess, ...] | None = None
    # Live readings that `monitor` samples; recordings fill what they contain.
    memory_clock_mhz: int | None = None
    memory_clock_max_mhz: int | None = None
    fan_speed_percent: float | None = None
    memory_temperature_c: float | None = None
    # AMD's two die sensors (rocm-smi "edge"/"junction", amd-smi "edge"/"hotspot"); MI300-class
    # boards have no edge sensor. temperature_c is the edge one where there is one.
    temperature_edge_c: float | None = None
    temperature_junction_c: float | None = None
    energy_consumed_joules: float | None = None  # NVML counter since the driver loaded
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    pcie_replay_errors: int | None = None  # counter since the driver loaded
    nvlink_tx_bytes: int | None = None  # counters since the driver loaded, all links
    nvlink_rx_bytes: int | None = None
    # GPM (GPU Performance Monitoring, Hopper and newer): what DCGM's PROF_* fields report.
    graphics_activity_percent: float | None = None
    sm_activity_percent: float | None = None
    sm_occupancy_percent: float | None = None
    tensor_activity_percent: float | None = None
    dram_activity_percent: float | None = None

    @property
    def is_nvidia(self) -> bool:
        return self.vendor in (None, "nvidia")

    @property
    def busiest_engine_percent(self) -> float | None:
        """The busiest engine: the SMs, or the video encoder/decoder (an NVENC/NVDEC job leaves
        the SMs idle); None when no engine was read."""
        engines = (
            self.utilization_gpu_percent,
            self.utilization_encoder_percent,
            self.utilization_decoder_percent,
        )
        read = [value for value in engines if value is not None]
        return max(read) if read else None


@dataclass(frozen=True)
class Rocm:
    """AMD's software stack: what rocm-smi/amd-smi report and what the ROCm user space holds."""

    version: str | None = None  # the ROCm release, "6.1.2" (rocm-smi's "ROCm version" or /opt/rocm)
    amdgpu_driver_version: str | None = (
        None  # the kernel driver, "6.3.6" (rocm-smi "Driver version")
    )
    tool: str | None = None  # the tool that reported it: "rocm-smi 1.4.1", "amd-smi 24.6.2"
    kfd_present: bool | None = None  # /dev/kfd exists (the amdgpu driver's compute interface)
    kfd_accessible: bool | None = None  # this user can open /dev/kfd read-write
    render_accessible: bool | None = None  # ... and the /dev/dri/renderD* nodes
    user_groups: tuple[str, ...] | None = None  # the groups this user is in (render, video)


@dataclass(frozen=True)
class Gaudi:
    """Intel Gaudi's software stack as hl-smi reports it."""

    driver_version: str | None = None  # the habanalabs kernel driver, "1.17.0-ac9e6e3"
    tool: str | None = None  # "hl-smi v1.17.0-ac9e6e3"


@dataclass(frozen=True)
class Topology:
    """`nvidia-smi topo -m`: labels and the connection matrix (X, NV12, PIX, SYS, ...)."""

    labels: tuple[str, ...] = ()
    matrix: tuple[tuple[str, ...], ...] = ()
    nvlink_active_links: tuple[int, ...] | None = None  # per GPU index

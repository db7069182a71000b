"""Step time from a traced step: a roofline per operator, plus the strategy's communication.

Each operator takes the longer of its compute time (FLOPs over the GPU's dense peak for the
operator's dtype, scaled by the measured matmul ceiling (above 1 on GeForce cards, which boost
past the clock their datasheet peak is quoted at) and a calibrated efficiency ≤ 1)
and its memory time (bytes over the memory bandwidth, scaled by an efficiency ≤ 1), never less
than a kernel's floor. So no operator beats its peak and MFU ≤ 100% by construction.
Collectives are ring/tree volumes over the slowest link they cross plus a latency per
collective, hidden under the compute they overlap with; scaling efficiency is the step without
communication over the step with it, so it is ≤ 100% by construction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dlrig.fit.sharding import Plan, Sizes, compute_bytes, mixed_frozen_bytes, shard_count
from dlrig.fit.tracedata import DTYPE_CODES, KIND_CODES, PHASE_CODES
from dlrig.knowledge.gpus import GpuSpec

if TYPE_CHECKING:
    from dlrig.fit.options import Interconnect
    from dlrig.fit.tracedata import OpTable, Trace

# Per-direction bandwidth of a x16 PCIe link, GB/s, by generation.
PCIE_X16_GBS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 126.0}


@dataclass(frozen=True)
class TimeSetup:
    precision: str
    strategy: str
    gpus: int
    gpus_per_node: int
    grad_accum: int
    interconnect: Interconnect
    network_gbps: float
    calibration: dict[str, float]
    mamf_ratio: float
    offload: str = "none"
    channels_last: bool = False
    grad_sync: bool = True  # False: FSDP reduce-scatters once per step, not per micro-batch
    mixed_units: bool = False  # FSDP1 units of frozen and trainable weights: all reduced
    fp8: bool = False  # Float8 linears: 16-bit matmuls of forward and backward at the FP8 peak
    fp8_mamf_ratio: float = 0.735
    compiled: bool = False  # torch.compile: FP8 casts fuse into the kernels that feed them
    # pipeline stages under FSDP: weights gathered and gradients reduced once per step, not per
    # micro-batch (reshard_after_forward=False, gradient sync only in the last backward)
    pipelined: bool = False
    # the fused attention kernel's reach on this architecture relative to Ampere's
    attention_ratio: float = 1.0
    # activation offloading: saved-activation bytes per micro-batch that go to the host in
    # forward and come back in backward
    activation_offload_bytes: float = 0.0


@dataclass(frozen=True)
class PhaseTimes:
    forward_s: float
    backward_s: float
    optimizer_s: float
    compute_bound_s: float
    forward_flops: float
    backward_flops: float


@dataclass(frozen=True)
class StepTime:
    forward_s: float
    backward_s: float
    optimizer_s: float
    communication_s: float
    exposed_communication_s: float
    offload_s: float
    step_s: float
    ideal_step_s: float  # the same step with free communication
    bus_bandwidth_gbs: float
    compute_bound_fraction: float
    pipeline_bubble_s: float = 0.0  # pipeline stages idle while the pipeline fills and drains


def _peak_tflops(spec: GpuSpec, dtype: str, precision: str) -> float:
    """Dense peak for an operator running in `dtype` under the run's precision setting."""
    fp32 = spec.fp32_tflops or 1.0
    if dtype in ("bfloat16",):
        return spec.bf16_tflops or spec.fp16_tflops or fp32
    if dtype in ("float16",):
        return spec.fp16_tflops or fp32
    if precision == "tf32":
        return spec.tf32_tflops or fp32
    return fp32


def _peak_vector(spec: GpuSpec, precision: str) -> tuple[float, float, float, float]:
    """Peaks (TFLOPS) for (bf16, fp16, fp32 ops, fp32 convolutions) under the precision setting."""
    conv_precision = "tf32" if precision == "fp32" else precision  # cuDNN allow_tf32 defaults on
    return (
        _peak_tflops(spec, "bfloat16", precision),
        _peak_tflops(spec, "float16", precision),
        _peak_tflops(spec, "float32", precision),
        _peak_tflops(spec, "float32", conv_precision),
    )


def _op_peaks(ops: OpTable, spec: GpuSpec, precision: str) -> np.ndarray:
    """The dense peak (TFLOPS) each operator is timed against."""
    bf16, fp16, fp32, conv32 = _peak_vector(spec, precision)
    conv = ops.kind == KIND_CODES["conv"]
    return np.where(
        ops.dtype == 0,
        bf16,
        np.where(ops.dtype == 1, fp16, np.where(conv, conv32, fp32)),
    )


def peak_used_tflops(trace: Trace, spec: GpuSpec, precision: str, fp8: bool = False) -> float:
    """The highest dense peak any traced operator is timed against: MFU's denominator, so that
    MFU cannot pass 100% (fp32 runs count TF32 convolutions at TF32's peak, --fp8 runs the
    FP8 peak)."""
    ops = trace.ops
    if not len(ops):
        return float(spec.fp32_tflops or 1.0)
    peaks = _op_peaks(ops, spec, precision)
    if fp8 and spec.fp8_tflops:
        peaks = np.where(_fp8_ops(ops), float(spec.fp8_tflops), peaks)
    used = peaks[ops.flops > 0]
    return float(max(used.max(initial=0.0), spec.fp32_tflops or 1.0))


def op_seconds(
    ops: OpTable,
    peak_tflops: np.ndarray | float,
    fp32_tflops: np.ndarray | float,
    bandwidth_gbs: np.ndarray | float,
    mamf_ratio: np.ndarray | float,
    calibration: dict[str, float],
    channels_last: np.ndarray | bool = False,
    attention_ratio: float = 1.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, compute-bound?) of each operator: the roofline by operator class.

    Compute time is FLOPs over the peak for the operator's dtype times a class efficiency ≤ 1:
    16-bit tensor-core matmuls reach `tensor_core_efficiency` of the measured matmul ceiling
    (MAMF), TF32 ones `tf32_efficiency` of it, fp32 matmuls on CUDA cores `fp32_efficiency` of
    the peak; convolutions as matmuls of their dtype (implicit GEMM; a separate convolution
    efficiency went to 1.0 when fitted), and `nchw_conv_efficiency` of that on
    tensor cores over an (N, C, H, W) input (cuDNN's NHWC kernels are the fast ones: the input
    and output are transposed, which also costs their bytes again); fused attention
    `attention_efficiency` of the peak. Memory time is the bytes over
    `memory_bandwidth_efficiency` of the bandwidth. Every computing kernel adds a
    `kernel_tail_us` (the last partial wave, the ramp up) or, if less, its own time again, and
    no operator takes less than
    `min_kernel_us` (what eager PyTorch needs to launch it). The arguments may be arrays (one
    value per operator) so that many traces evaluate at once.
    """
    c = calibration
    peak = np.asarray(peak_tflops, dtype=np.float64)
    tensor_core = peak > np.asarray(fp32_tflops) * 1.01
    kind = ops.kind
    ceiling = np.asarray(mamf_ratio, dtype=np.float64)
    tf32 = tensor_core & (ops.dtype == DTYPE_CODES["float32"])
    efficiency = np.where(
        tensor_core,
        np.minimum(
            1.0,
            np.where(tf32, min(1.0, c["tf32_efficiency"]), min(1.0, c["tensor_core_efficiency"]))
            * ceiling,
        ),
        min(1.0, c["fp32_efficiency"]),
    )
    conv = kind == KIND_CODES["conv"]
    nchw = conv & ops.nchw & tensor_core & ~np.asarray(channels_last)
    efficiency = np.where(nchw, efficiency * min(1.0, c["nchw_conv_efficiency"]), efficiency)
    efficiency = np.where(
        kind == KIND_CODES["attention"],
        min(1.0, c["attention_efficiency"]) * attention_ratio,
        efficiency,
    )
    bandwidth = np.asarray(bandwidth_gbs) * 1e9 * min(1.0, c["memory_bandwidth_efficiency"])
    computing = ops.flops > 0
    compute = np.where(computing, ops.flops / (peak * 1e12 * efficiency), 0.0)
    memory = ops.traffic / bandwidth
    work = np.maximum(compute, memory)
    # the tail is at most the kernel's own work: a kernel that is one partial wave (a LoRA
    # adapter's rank-r matmul) has no wave after it
    tail = np.minimum(c["kernel_tail_us"] * 1e-6, work)
    seconds = work + np.where(computing, tail, 0.0)
    seconds = seconds + np.where(nchw, ops.traffic / bandwidth, 0.0)
    seconds = np.maximum(seconds, c["min_kernel_us"] * 1e-6)
    return seconds, computing & (compute >= memory)


def _op_times(trace: Trace, spec: GpuSpec, setup: TimeSetup) -> tuple[np.ndarray, np.ndarray]:
    cached = trace.__dict__.get("_times")
    key = (
        spec.id,
        setup.precision,
        setup.mamf_ratio,
        setup.channels_last,
        setup.fp8,
        setup.fp8_mamf_ratio,
        setup.compiled,
        setup.attention_ratio,
        tuple(sorted(setup.calibration.items())),
    )
    if cached is not None and cached[0] == key:
        return cached[1]
    ops = trace.ops
    peaks = _op_peaks(ops, spec, setup.precision)
    mamf: np.ndarray | float = setup.mamf_ratio
    fp8 = _fp8_ops(ops) if setup.fp8 and spec.fp8_tflops else None
    if fp8 is not None:
        peaks = np.where(fp8, float(spec.fp8_tflops or 0.0), peaks)
        mamf = np.where(fp8, setup.fp8_mamf_ratio, setup.mamf_ratio)
    bandwidth = spec.memory_bandwidth_gbs or 500.0
    seconds, bound = op_seconds(
        ops,
        peaks,
        spec.fp32_tflops or 1.0,
        bandwidth,
        mamf,
        setup.calibration,
        setup.channels_last,
        setup.attention_ratio,
    )
    if fp8 is not None:
        seconds = seconds + _fp8_casts(ops, fp8, bandwidth, setup)
    trace.__dict__["_times"] = (key, (seconds, bound))
    return seconds, bound


# Bytes moved to give one FP8 matmul its operands, per byte of the matmul's own traffic
# (operands ≈ half of it at training shapes). Dynamic tensorwise scaling reads each operand
# once for its absolute maximum, then reads it again and writes its FP8 copy: 2.5 operand
# bytes, 1.25 traffic bytes, in two extra kernels. Under torch.compile the maximum fuses into
# the kernel that made the operand: 1.5 operand bytes, 0.75 traffic bytes, no extra launch.
# Not fitted (four measured rows); benchmarks/fit_accuracy.py prints them.
FP8_CAST_TRAFFIC = {False: 1.25, True: 0.75}
FP8_CAST_KERNELS = {False: 2, True: 0}


def _fp8_ops(ops: OpTable) -> np.ndarray:
    """The matmuls Float8 training runs in FP8: 16-bit matmuls of forward and backward (the
    linear layers; dlrig does not tell the output projection apart, which torchtitan keeps in
    bf16: about 6% of an 8B model's matmul FLOPs)."""
    return (
        (ops.kind == KIND_CODES["matmul"])
        & (ops.dtype <= DTYPE_CODES["float16"])
        & (ops.phase <= PHASE_CODES["backward"])
    )


def _fp8_casts(ops: OpTable, fp8: np.ndarray, bandwidth_gbs: float, setup: TimeSetup) -> np.ndarray:
    c = setup.calibration
    bandwidth = bandwidth_gbs * 1e9 * min(1.0, c["memory_bandwidth_efficiency"])
    seconds = ops.traffic * FP8_CAST_TRAFFIC[setup.compiled] / bandwidth
    seconds = seconds + FP8_CAST_KERNELS[setup.compiled] * c["min_kernel_us"] * 1e-6
    return np.where(fp8, seconds, 0.0)


def bus_bandwidth_gbs(
    spec: GpuSpec, setup: TimeSetup, gpus: int | None = None, efficiency: float | None = None
) -> float:
    """Collective bus bandwidth per GPU over `gpus` GPUs: the slowest link the rings cross.

    Across nodes NCCL stripes its rings over every NIC of the node, so the inter-node limit is
    the node's total network bandwidth (per-GPU NIC rate × GPUs per node), not one NIC's.
    """
    gpus = setup.gpus if gpus is None else gpus
    if efficiency is None:
        efficiency = min(1.0, setup.calibration["allreduce_efficiency"])
    if setup.interconnect == "nvlink" and spec.nvlink_gbs:
        intra = spec.nvlink_gbs / 2  # the catalogue lists both directions together
    else:
        intra = PCIE_X16_GBS.get(spec.pcie_gen or 4, 31.5) * (spec.pcie_lanes or 16) / 16
    link = intra
    if gpus > setup.gpus_per_node:
        link = min(intra, setup.network_gbps / 8 * setup.gpus_per_node)
    return link * efficiency


def phase_times(trace: Trace, spec: GpuSpec, setup: TimeSetup) -> PhaseTimes:
    ops = trace.ops
    seconds, bound = _op_times(trace, spec, setup)
    weights = ops.weights()
    seconds = seconds * weights
    flops = ops.flops * weights
    by_phase = [float(seconds[ops.phase == code].sum()) for code in (0, 1, 2)]
    return PhaseTimes(
        forward_s=by_phase[0],
        backward_s=by_phase[1],
        optimizer_s=by_phase[2],
        compute_bound_s=float(seconds[bound].sum()),
        forward_flops=float(flops[ops.phase == 0].sum()),
        backward_flops=float(flops[ops.phase == 1].sum()),
    )


def _latency_s(setup: TimeSetup, collectives: float, gpus: int) -> float:
    """Per-collective latency: NCCL's rings within a node, trees across nodes (log2 of nodes)."""
    if gpus <= 1:
        return 0.0
    nodes = max(1, math.ceil(gpus / setup.gpus_per_node))
    per = setup.calibration["collective_latency_us"] * 1e-6 * (1 + math.log2(nodes))
    return collectives * per


def _communication(sizes: Sizes, spec: GpuSpec, setup: TimeSetup) -> tuple[float, float, float]:
    """(seconds of collectives per step, bus bandwidth GB/s, number of collectives)."""
    seconds, bandwidth, count = _collectives(sizes, spec, setup)
    return seconds, bandwidth, max(1.0, count)


def _collectives(sizes: Sizes, spec: GpuSpec, setup: TimeSetup) -> tuple[float, float, float]:
    n, gpus = sizes.trainable_count, setup.gpus
    if gpus <= 1:
        return 0.0, bus_bandwidth_gbs(spec, setup, 1), 1.0
    m = sizes.trainable_bytes / n if n else 4.0
    c = compute_bytes(setup.precision)
    frozen = sizes.frozen_bytes
    plan = Plan(setup.strategy, gpus, setup.gpus_per_node, setup.precision, "adamw")
    shard = shard_count(plan)
    # Three collectives per block (gather forward, gather backward, reduce): blocks counted in
    # bytes, so that a LoRA's frozen base (bytes) and few trainable parameters (a count) do not
    # make a tiny adapter look like one of thousands of blocks.
    block_bytes = m * sizes.block_trainable + sizes.block_frozen_bytes
    # a model without repeated blocks is one FSDP unit (as sharding.held takes it)
    layers_collectives = 3.0 * max(1.0, (m * n + frozen) / block_bytes) if block_bytes > 0 else 3.0
    bandwidth = bus_bandwidth_gbs(spec, setup) * 1e9
    if setup.strategy == "ddp":
        volume = 2 * (gpus - 1) / gpus * m * n
        buckets = max(1.0, m * n / 25e6)  # DDP's default 25 MB buckets
        return volume / bandwidth + _latency_s(setup, buckets, gpus), bandwidth / 1e9, buckets
    if setup.strategy in ("zero1", "zero2"):
        volume = 2 * (gpus - 1) / gpus * c * n  # reduce-scatter + all-gather of parameters
        buckets = max(1.0, c * n / (c * 5e8))
        seconds = volume / bandwidth + _latency_s(setup, 2 * buckets, gpus)
        return seconds, bandwidth / 1e9, 2 * buckets
    gathers = 1 if setup.strategy == "fsdp-grad-op" else 2
    reduce_bytes = c if setup.strategy == "zero3" else m
    reduce_share = 1.0 if setup.grad_sync or setup.pipelined else 1.0 / setup.grad_accum
    ring = (shard - 1) / shard
    # FSDP1 mixed units reduce-scatter their whole flat gradient, frozen parts included
    reduced = reduce_bytes * n + (mixed_frozen_bytes(sizes) if setup.mixed_units else 0.0)
    if setup.strategy == "hsdp":
        intra = bus_bandwidth_gbs(spec, setup, shard) * 1e9
        volume = ring * (gathers * (c * n + frozen) + reduced * reduce_share)
        replicas = gpus // shard
        across = (
            2 * (replicas - 1) / replicas * reduced / shard * reduce_share if replicas > 1 else 0.0
        )
        seconds = volume / intra + across / bandwidth
        seconds += _latency_s(setup, layers_collectives, gpus)
        return seconds, bandwidth / 1e9, layers_collectives
    volume = ring * (gathers * (c * n + frozen) + reduced * reduce_share)
    seconds = volume / bandwidth + _latency_s(setup, layers_collectives, gpus)
    return seconds, bandwidth / 1e9, layers_collectives


def host_link_bytes_per_s(spec: GpuSpec) -> float:
    """What the GPU's host link carries, bytes/s: its PCIe generation and lanes at 80% (an
    x8 card moves half of an x16's). A GPU without PCIe figures (GH200's chip-to-chip link)
    is taken as PCIe 4.0 x16: conservative."""
    lanes = (spec.pcie_lanes or 16) / 16
    return PCIE_X16_GBS.get(spec.pcie_gen or 4, 31.5) * lanes * 1e9 * 0.8


def _offload_s(sizes: Sizes, spec: GpuSpec, setup: TimeSetup) -> float:
    """Host optimizer step and PCIe traffic of CPU offload (not hidden: conservative)."""
    if setup.offload == "none":
        return 0.0
    n = sizes.trainable_count
    plan = Plan(setup.strategy, setup.gpus, setup.gpus_per_node, setup.precision, "adamw")
    shard_params = n / shard_count(plan)
    pcie = host_link_bytes_per_s(spec)
    host = setup.calibration["host_memory_gbs_per_gpu"] * 1e9
    moved = 4.0 * shard_params * 2  # fp32 gradients down, parameters up
    if setup.offload == "params":
        moved += compute_bytes(setup.precision) * (n + sizes.frozen_bytes) / shard_count(plan) * 2
    adam = 16.0 * shard_params * 2  # read and write parameter, gradient and two moments
    return moved / pcie + adam / host


def step_time(phases: PhaseTimes, sizes: Sizes, spec: GpuSpec, setup: TimeSetup) -> StepTime:
    sharded = setup.strategy != "ddp" and setup.gpus > 1
    plan = Plan(setup.strategy, setup.gpus, setup.gpus_per_node, setup.precision, "adamw")
    optimizer = phases.optimizer_s / (shard_count(plan) if sharded else 1)
    if setup.offload != "none":
        optimizer = 0.0  # the host runs the optimizer: counted in offload_s
    communication, bandwidth, collectives = _communication(sizes, spec, setup)
    overlapped = phases.backward_s + (
        phases.forward_s if setup.strategy in ("zero3", "fsdp", "hsdp", "fsdp-grad-op") else 0.0
    )
    hidden = min(1.0, setup.calibration["overlap_fraction"]) * overlapped * setup.grad_accum
    # the last collective starts when the compute it follows ends: it is never hidden
    tail = communication / collectives
    exposed = max(tail, communication * _comm_repeats(setup) - hidden) if setup.gpus > 1 else 0.0
    offload = _offload_s(sizes, spec, setup)
    micro = phases.forward_s + phases.backward_s
    if setup.activation_offload_bytes:
        # each saved activation crosses the host link twice on a side stream that overlaps
        # the compute (torchtune's OffloadActivations); only what outlasts the compute shows
        transfer = 2.0 * setup.activation_offload_bytes / host_link_bytes_per_s(spec)
        offload += setup.grad_accum * max(0.0, transfer - micro)
    ideal = setup.grad_accum * micro + optimizer + offload
    total = phases.forward_s + phases.backward_s + phases.optimizer_s
    return StepTime(
        forward_s=phases.forward_s,
        backward_s=phases.backward_s,
        optimizer_s=optimizer,
        communication_s=communication * _comm_repeats(setup),
        exposed_communication_s=exposed,
        offload_s=offload,
        step_s=ideal + exposed,
        ideal_step_s=ideal,
        bus_bandwidth_gbs=bandwidth,
        compute_bound_fraction=phases.compute_bound_s / total if total else 0.0,
    )


def _comm_repeats(setup: TimeSetup) -> int:
    """Sharded parameters are gathered again for every micro-batch; DDP/ZeRO-1/2 reduce once."""
    if setup.strategy in ("zero3", "fsdp", "hsdp", "fsdp-grad-op") and not setup.pipelined:
        return setup.grad_accum
    return 1

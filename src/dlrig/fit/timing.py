"""Step time from a traced step: a roofline per operator, plus gradient communication.

Each operator takes the longer of its compute time (FLOPs over the GPU's dense peak for the
operator's dtype, scaled by the measured matmul ceiling and a calibrated efficiency) and its
memory time (bytes read and written over the memory bandwidth, scaled by a calibrated
efficiency), never less than a kernel's floor. Gradient synchronisation is a ring all-reduce,
2(N−1)/N × bytes ÷ bus bandwidth, hidden under backward as DDP's bucketing does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dlrig.fit.memory import PRECISION_BYTES
from dlrig.fit.trace import Trace
from dlrig.knowledge.gpus import GpuSpec

# Per-direction bandwidth of a x16 PCIe link, GB/s, by generation.
PCIE_X16_GBS = {3: 15.75, 4: 31.5, 5: 63.0, 6: 126.0}


@dataclass(frozen=True)
class TimeSetup:
    precision: str
    strategy: str
    gpus: int
    gpus_per_node: int
    grad_accum: int
    interconnect: str  # nvlink | pcie
    network_gbps: float
    calibration: dict[str, float]
    mamf_ratio: float


@dataclass(frozen=True)
class StepTime:
    forward_s: float
    backward_s: float
    optimizer_s: float
    communication_s: float
    exposed_communication_s: float
    step_s: float
    bus_bandwidth_gbs: float
    compute_bound_fraction: float


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


_DTYPE_CODES = {"bfloat16": 0, "float16": 1}  # everything else: float32 (2)


def _peak_vector(spec: GpuSpec, precision: str) -> tuple[float, float, float, float]:
    """Peaks (TFLOPS) for (bf16, fp16, fp32 ops, fp32 convolutions) under the precision setting."""
    conv_precision = "tf32" if precision == "fp32" else precision  # cuDNN allow_tf32 defaults on
    return (
        _peak_tflops(spec, "bfloat16", precision),
        _peak_tflops(spec, "float16", precision),
        _peak_tflops(spec, "float32", precision),
        _peak_tflops(spec, "float32", conv_precision),
    )


@dataclass(frozen=True)
class OpArrays:
    flops: np.ndarray
    traffic: np.ndarray
    dtype: np.ndarray  # 0 bf16, 1 fp16, 2 other
    conv: np.ndarray
    phase: np.ndarray  # 0 forward, 1 backward, 2 optimizer


_ARRAYS: dict[int, tuple[Trace, OpArrays]] = {}


def op_arrays(trace: Trace) -> OpArrays:
    """Per-operator costs of a trace as arrays (cached: calibration evaluates them many times)."""
    cached = _ARRAYS.get(id(trace))
    if cached is not None and cached[0] is trace:
        return cached[1]
    phases = {"forward": 0, "backward": 1, "optimizer": 2}
    arrays = OpArrays(
        flops=np.array([op.flops for op in trace.ops], dtype=np.float64),
        traffic=np.array([op.bytes for op in trace.ops], dtype=np.float64),
        dtype=np.array([_DTYPE_CODES.get(op.dtype, 2) for op in trace.ops], dtype=np.int8),
        conv=np.array(["convolution" in op.name for op in trace.ops], dtype=bool),
        phase=np.array([phases.get(op.phase, 0) for op in trace.ops], dtype=np.int8),
    )
    _ARRAYS[id(trace)] = (trace, arrays)
    return arrays


def _op_times(arrays: OpArrays, spec: GpuSpec, setup: TimeSetup) -> tuple[np.ndarray, np.ndarray]:
    """(seconds per op, whether compute-bound) for every traced operator."""
    bandwidth = (
        (spec.memory_bandwidth_gbs or 500.0)
        * 1e9
        * setup.calibration["memory_bandwidth_efficiency"]
    )
    floor = setup.calibration["min_kernel_us"] * 1e-6
    bf16, fp16, fp32, conv32 = _peak_vector(spec, setup.precision)
    peaks = np.where(
        arrays.dtype == 0,
        bf16,
        np.where(arrays.dtype == 1, fp16, np.where(arrays.conv, conv32, fp32)),
    )
    rate = peaks * 1e12 * setup.mamf_ratio * setup.calibration["matmul_efficiency_of_mamf"]
    compute = arrays.flops / rate
    memory = arrays.traffic / bandwidth
    seconds = np.maximum(np.maximum(compute, memory), floor)
    return seconds, (arrays.flops > 0) & (compute >= memory)


def bus_bandwidth_gbs(spec: GpuSpec, setup: TimeSetup) -> float:
    """All-reduce bus bandwidth per GPU: the slowest link the rings cross.

    Across nodes NCCL stripes its rings over every NIC of the node, so the inter-node limit is
    the node's total network bandwidth (per-GPU NIC rate × GPUs per node), not one NIC's.
    """
    efficiency = setup.calibration["allreduce_efficiency"]
    if setup.interconnect == "nvlink" and spec.nvlink_gbs:
        intra = spec.nvlink_gbs / 2  # the catalogue lists both directions together
    else:
        intra = PCIE_X16_GBS.get(spec.pcie_gen or 4, 31.5) * (spec.pcie_lanes or 16) / 16
    link = intra
    if setup.gpus > setup.gpus_per_node:
        link = min(intra, setup.network_gbps / 8 * setup.gpus_per_node)
    return link * efficiency


def step_time(trace: Trace, spec: GpuSpec, setup: TimeSetup) -> StepTime:
    arrays = op_arrays(trace)
    seconds, bound = _op_times(arrays, spec, setup)
    phase_time = {
        name: float(seconds[arrays.phase == code].sum())
        for name, code in (("forward", 0), ("backward", 1), ("optimizer", 2))
    }
    total = float(seconds.sum())
    compute_bound = float(seconds[bound].sum())
    sharded = setup.strategy in ("zero1", "zero2", "fsdp") and setup.gpus > 1
    optimizer = phase_time["optimizer"] / (setup.gpus if sharded else 1)
    communication = 0.0
    bandwidth = bus_bandwidth_gbs(spec, setup)
    if setup.gpus > 1:
        master, compute = PRECISION_BYTES[setup.precision]
        n = setup.gpus
        ring = 2 * (n - 1) / n
        if setup.strategy == "ddp":
            volume = ring * master * trace.trainable_count  # gradients reduced in the param dtype
        elif setup.strategy in ("zero1", "zero2"):
            volume = ring * compute * trace.trainable_count  # reduce-scatter + all-gather
        else:
            # FSDP: all-gather in forward and in backward, reduce-scatter of fp32 gradients
            volume = (n - 1) / n * (2 * compute + master) * trace.trainable_count
        communication = volume / (bandwidth * 1e9)
    hidden = setup.calibration["overlap_fraction"] * (
        phase_time["backward"] + (phase_time["forward"] if setup.strategy == "fsdp" else 0.0)
    )
    exposed = max(0.0, communication - hidden)
    micro = phase_time["forward"] + phase_time["backward"]
    step = setup.grad_accum * micro + exposed + optimizer
    return StepTime(
        forward_s=phase_time["forward"],
        backward_s=phase_time["backward"],
        optimizer_s=optimizer,
        communication_s=communication,
        exposed_communication_s=exposed,
        step_s=step,
        bus_bandwidth_gbs=bandwidth,
        compute_bound_fraction=compute_bound / total if total else 0.0,
    )

"""What every stage after the trace shares: the calibration tables, one evaluation's resolved
`Context`, and memory and time at a batch. Below pipeline and its strategies (assemble,
analytic, inference, advice, batching, assumptions), which all import it.
"""

from __future__ import annotations

import dataclasses
import functools
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from dlrig.errors import InputError
from dlrig.fit import hardware, parallel
from dlrig.fit.memory import MemoryEstimate, combine, extrapolate
from dlrig.fit.options import WORKLOAD_FIELDS, Options, check, replace_options
from dlrig.fit.sharding import Plan, compute_bytes, held
from dlrig.fit.timing import (
    PhaseTimes,
    StepTime,
    TimeSetup,
    bus_bandwidth_gbs,
    phase_times,
    step_time,
)
from dlrig.fit.tracedata import KIND_CODES
from dlrig.knowledge.gpus import GpuSpec

if TYPE_CHECKING:
    from dlrig.fit.tracing import TracedWorkload

# one traced AdamW step serves all of these (bitsandbytes' state is sized analytically)
SAME_TRACE_OPTIMIZERS = ("adam", "adamw", "adamw-8bit", "paged-adamw", "paged-adamw-8bit")


@functools.cache
def calibration() -> dict[str, Any]:
    text = (
        resources.files("dlrig.knowledge")
        .joinpath("data", "fit_calibration.toml")
        .read_text("utf-8")
    )
    return tomllib.loads(text)


def fitted(overrides: dict[str, float] | None = None) -> dict[str, float]:
    table = calibration()["fitted"]
    values = {k: float(v) for k, v in table.items() if isinstance(v, float | int)}
    values.update(overrides or {})
    return values


@dataclass(frozen=True)
class Context:
    """One evaluation's resolved facts."""

    options: Options
    spec: GpuSpec
    memory_bytes: int
    gpu_origin: str
    precision: str
    precision_why: str


def resolve(traced: TracedWorkload, machine: Any, changes: dict[str, Any]) -> Context:
    workload_changes = [
        k for k in changes if k in WORKLOAD_FIELDS and k != "optimizer" and k != "precision"
    ]
    if workload_changes:
        raise InputError(
            f"evaluate() cannot change {', '.join(workload_changes)}: they need a new trace",
            fix="call fit.trace(...) with those options",
        )
    options = replace_options(traced.options, **changes)
    check(options)
    mesh = parallel.mesh_of(options)
    if not mesh.trivial and traced.method != "trace":
        raise InputError(
            f"--tp/--pp/--cp are modelled on a traced step, and {traced.workload.name} could "
            "only be counted analytically",
            fix="drop the model-parallel degrees, or give a model dlrig can trace (--config)",
        )
    parallel.check_model(mesh, traced.workload.config, traced.layers, traced.workload.seq_len)
    if options.optimizer != traced.options.optimizer and not (
        options.optimizer in SAME_TRACE_OPTIMIZERS
        and traced.options.optimizer in SAME_TRACE_OPTIMIZERS
    ):
        raise InputError(
            f"evaluate() cannot switch {traced.options.optimizer} to {options.optimizer}",
            fix="trace with that --optimizer",
        )
    target = hardware.target(options.gpu, machine)
    require_fp8(options, target.spec)
    precision, why = hardware.resolve_precision(
        options.precision, target.spec, traced.precision, sharded_full(options)
    )
    if storage(precision) != storage(traced.precision):
        raise InputError(
            f"evaluate() at {precision} needs a trace at that precision",
            fix=f"trace with --precision {precision}",
        )
    return Context(options, target.spec, target.memory_bytes, target.origin, precision, why)


def require_fp8(options: Options, spec: GpuSpec) -> None:
    """--fp8 needs FP8 tensor cores: one line naming the GPU, else nothing."""
    if options.fp8 and not hardware.has(spec, "fp8"):
        raise InputError(
            f"--fp8: {spec.id} ({spec.architecture}) has no fp8 tensor cores",
            fix="drop --fp8, or choose a GPU that has them (Ada, Hopper, Blackwell, MI300)",
        )


def sharded_full(options: Options) -> bool:
    """A full fine-tune sharded over several GPUs (FSDP or ZeRO): its trainable weights are
    fp32 masters by default (hardware.resolve_precision says why). LoRA's trainable adapters
    are fp32 already and its frozen base is not upcast."""
    return options.strategy != "ddp" and options.gpus > 1 and not (options.lora or options.qlora)


def storage(precision: str) -> str:
    """What a trace depends on: how weights are stored and whether autocast casts them
    (amp-bf16 and amp-fp16 allocate the same bytes; fp32 and tf32 too)."""
    return {"fp32": "fp32", "tf32": "fp32", "amp-fp16": "amp", "amp-bf16": "amp"}.get(
        precision, precision
    )


def data_parallel_node(options: Options) -> int:
    """Members of one data-parallel group on a node: tp is the innermost mesh dimension."""
    return max(1, options.gpus_per_node // options.tp)


def plan_of(ctx: Context) -> Plan:
    o = ctx.options
    data_parallel = parallel.mesh_of(o).data_parallel
    return Plan(
        data_parallel_strategy(o),
        data_parallel,
        data_parallel_node(o),
        ctx.precision,
        o.optimizer,
        o.offload,
        o.prefetch,
        optimizer_in_backward=o.optimizer_in_backward,
        unsynced=(not o.grad_sync or parallel.pipelined_fsdp(o))
        and o.grad_accum > 1
        and data_parallel > 1,
        mixed_units=o.fsdp_mixed_units,
    )


def data_parallel_strategy(options: Options) -> str:
    """The data-parallel strategy as memory and time see it. FSDP under a pipeline keeps each
    stage's weights gathered from forward to backward (torchtitan: reshard_after_forward=False
    with PP, no all-gather per micro-batch): SHARD_GRAD_OP's footprint and one gather a step."""
    return "fsdp-grad-op" if parallel.pipelined_fsdp(options) else options.strategy


def memory_at(traced: TracedWorkload, ctx: Context, batch: int) -> MemoryEstimate:
    mesh = parallel.mesh_of(ctx.options)
    sizes_table = calibration()["sizes"]
    workspaces = int(sizes_table["cublas_workspace_bytes"]) + (
        int(sizes_table["cudnn_workspace_bytes"]) if convolutional(traced) else 0
    )
    samples = traced.at(batch)
    return combine(
        samples,
        traced.layers or 1,
        parallel.scale_held(held(parallel.split_sizes(traced.sizes, mesh), plan_of(ctx)), mesh),
        ctx.options.grad_accum > 1 or ctx.options.keep_grads,
        workspaces,
        int(sizes_table["cuda_context_bytes"]),
        int(sizes_table["nccl_buffers_bytes"]) if ctx.options.gpus > 1 else 0,
        fitted()["allocator_reserve_factor"],
        # offloading keeps the layer in flight and the next on the GPU: the shallowest trace
        # (two layers) holds exactly that
        min(d for d, _ in samples) if ctx.options.activation_offload and traced.layers else None,
    )


def convolutional(traced: TracedWorkload) -> bool:
    return any(
        bool((trace.ops.kind == KIND_CODES["conv"]).any())
        for _, trace in traced.at(traced.batch)[:1]
    )


def attention_ratio(architecture: str, constants: dict[str, float]) -> float:
    """Fused attention's speed on this architecture relative to Ampere's. Hopper's is fitted
    (FlashAttention-2 has no Hopper code path, and the measured Hopper rows say how much that
    costs: `constants` are the fitted ones); the others are stated in the calibration table."""
    if architecture == "hopper":
        return float(constants["hopper_attention_ratio"])
    table = calibration()["attention_ratio"]
    return float(table.get(architecture, table["default"]))


def time_setup(ctx: Context, overrides: dict[str, float] | None = None) -> TimeSetup:
    table = calibration()
    ratios = table["mamf_ratio"]
    fp8_ratios = table["mamf_ratio_fp8"]
    constants = fitted(overrides)
    o = ctx.options
    return TimeSetup(
        precision=ctx.precision,
        strategy=data_parallel_strategy(o),
        gpus=parallel.mesh_of(o).data_parallel,
        gpus_per_node=data_parallel_node(o),
        grad_accum=o.grad_accum,
        interconnect=o.interconnect or ("nvlink" if ctx.spec.has_nvlink else "pcie"),
        network_gbps=o.network_gbps or float(table["network"]["default_gbps"]),
        calibration=constants,
        mamf_ratio=float(ratios.get(ctx.spec.id, ratios["default"])),
        offload=o.offload,
        channels_last=o.channels_last,
        grad_sync=o.grad_sync,
        mixed_units=o.fsdp_mixed_units,
        fp8=o.fp8,
        fp8_mamf_ratio=float(fp8_ratios.get(ctx.spec.id, fp8_ratios["default"])),
        compiled=o.compile != "none",
        pipelined=parallel.pipelined_fsdp(o),
        attention_ratio=attention_ratio(ctx.spec.architecture, constants),
    )


def phases_at(
    traced: TracedWorkload, ctx: Context, batch: int, overrides: dict[str, float] | None = None
) -> PhaseTimes:
    setup = time_setup(ctx, overrides)
    samples = traced.at(batch)
    per = [phase_times(trace, ctx.spec, setup) for _, trace in samples]
    depths = [d for d, _ in samples]
    layers = traced.layers or 1
    whole = PhaseTimes(
        *(
            extrapolate([getattr(p, name) for p in per], depths, layers)
            for name in (
                "forward_s",
                "backward_s",
                "optimizer_s",
                "compute_bound_s",
                "forward_flops",
                "backward_flops",
            )
        )
    )
    return parallel.scale_phases(whole, parallel.mesh_of(ctx.options))


def time_at(
    traced: TracedWorkload, ctx: Context, batch: int, overrides: dict[str, float] | None = None
) -> tuple[PhaseTimes, StepTime]:
    phases = phases_at(traced, ctx, batch, overrides)
    mesh = parallel.mesh_of(ctx.options)
    setup = time_setup(ctx, overrides)
    if ctx.options.activation_offload:
        offloaded = memory_at(traced, ctx, batch).offloaded_activation_bytes
        setup = dataclasses.replace(setup, activation_offload_bytes=float(offloaded))
    step = step_time(phases, parallel.split_sizes(traced.sizes, mesh), ctx.spec, setup)
    if mesh.trivial:
        return phases, step
    o = ctx.options
    moved = parallel.traffic(
        mesh,
        traced.workload.config,
        traced.layers or 1,
        batch,
        traced.workload.seq_len or 1,
        compute_bytes(ctx.precision),
        o.checkpointed_fraction,
        model_parallel_links(ctx, setup),
        setup.calibration["collective_latency_us"] * 1e-6,
    )
    return phases, parallel.with_model_parallel(step, mesh, moved)


def model_parallel_links(ctx: Context, setup: TimeSetup) -> tuple[float, float, float]:
    """GB/s of bus bandwidth of the tp group, the cp group and a pipeline send. The mesh is laid
    out tp innermost, then cp, dp and pp: a tp group is the GPUs next to each other, a cp group
    takes one GPU of each tp group, and a stage sends to the same rank of the next stage, over
    its own NIC once stages are on different nodes. These are large, back-to-back collectives
    of activations: NCCL's own bus bandwidth, not the fitted data-parallel figure (which also
    absorbs how gradient buckets overlap)."""
    o = ctx.options
    mesh = parallel.mesh_of(o)
    per_node = o.gpus_per_node
    efficiency = min(1.0, setup.calibration["model_parallel_bus_efficiency"])

    def link(group: int, members_per_node: int) -> float:
        grouped = dataclasses.replace(
            setup, gpus=group, gpus_per_node=max(1, min(members_per_node, per_node))
        )
        return bus_bandwidth_gbs(ctx.spec, grouped, group, efficiency)

    stage_crosses_nodes = o.gpus > per_node and o.gpus // mesh.pp >= per_node
    return (
        link(mesh.tp, per_node),
        link(mesh.cp, data_parallel_node(o)),
        link(2, 1 if stage_crosses_nodes else 2),
    )

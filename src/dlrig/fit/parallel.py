"""Tensor, pipeline and context parallelism for training, as Megatron-LM and torchtitan run them.

`--gpus` is tp × pp × cp × dp. The trace is of the whole model at one micro-batch; this module
says what share of it one GPU holds and computes, and what the model-parallel groups add:

| degree | each GPU holds                                  | each GPU waits for (per micro-batch)          |
|--------|-------------------------------------------------|-----------------------------------------------|
| tp     | 1/tp of every weight (vocab-parallel embedding  | 4 all-gathers + 4 reduce-scatters of the      |
|        | and head, loss parallel); activations 1/tp      | layer's activations per layer (sequence       |
|        | (sequence parallelism shards the rest)          | parallel), 4 more when checkpointing replays  |
| pp     | ceil(L/pp) layers and the embedding or head;    | the bubble: (pp - 1) / v stage times per step |
|        | activations of min(pp, m)                       |                                               |
|        | micro-batches in flight on the first stage      | (v = 2 interleaved, 1 for 1F1B and GPipe);    |
|        | (1F1B), all m under GPipe                       | one send of activations per stage boundary    |
| cp     | activations 1/cp (the sequence is split)        | the keys and values of the other ranks, once  |
|        |                                                 | forward and twice backward (all-gather ring)  |

Data parallelism (DDP/FSDP/ZeRO) then runs over dp × cp GPUs (torchtitan shards FSDP over
dp_shard × cp), on the largest stage's share of the model over tp, with gpus-per-node / tp of
its members on each node
(tp is the innermost mesh dimension, so a data-parallel ring crosses a node's NICs once per tp
group). Compute divides evenly; smaller matrices per GPU are assumed to run as efficiently, and
tensor-parallel collectives are assumed exposed (async TP overlaps some of them: the estimate
is then a little slow). Activations sharded 1/tp assume sequence parallelism, which both
frameworks enable with tp.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlrig.errors import InputError
from dlrig.fit import hfconfig

if TYPE_CHECKING:
    from dlrig.fit.options import Options
    from dlrig.fit.sharding import Held, Sizes
    from dlrig.fit.timing import PhaseTimes, StepTime


VIRTUAL_STAGES = 2  # model chunks per GPU in the interleaved schedule (torchtitan's 405B runs)


@dataclass(frozen=True)
class Mesh:
    tp: int
    pp: int
    cp: int
    dp: int
    microbatches: int  # --grad-accum: the micro-batches one step pipelines
    schedule: str

    @property
    def trivial(self) -> bool:
        return self.tp == self.pp == self.cp == 1

    @property
    def model_split(self) -> int:
        """GPUs one copy of the weights is split over (before data-parallel sharding)."""
        return self.tp * self.pp

    @property
    def compute_split(self) -> int:
        """GPUs one micro-batch's work is split over."""
        return self.tp * self.pp * self.cp

    @property
    def data_parallel(self) -> int:
        """GPUs data parallelism (and FSDP's sharding) runs over."""
        return self.dp * self.cp

    @property
    def in_flight(self) -> float:
        """Micro-batches whose activations the first stage holds at once: all of them under
        GPipe, up to pp under 1F1B, and 1 + (pp - 1) / (pp v) times that interleaved
        (Korthikanti et al. 2022, "Reducing Activation Recomputation", section 4.2.3)."""
        if self.pp == 1:
            return 1.0
        if self.schedule == "gpipe":
            return float(self.microbatches)
        held = float(min(self.pp, self.microbatches))
        if self.schedule == "interleaved-1f1b":
            held *= 1 + (self.pp - 1) / (self.pp * VIRTUAL_STAGES)
        return held

    @property
    def bubble(self) -> float:
        """Step time over the busy time of one stage: (m + (pp - 1) / v) / m."""
        if self.pp == 1:
            return 1.0
        virtual = VIRTUAL_STAGES if self.schedule == "interleaved-1f1b" else 1
        return (self.microbatches + (self.pp - 1) / virtual) / self.microbatches

    def describe(self) -> str:
        parts = [f"TP {self.tp}"] if self.tp > 1 else []
        if self.pp > 1:
            parts.append(f"PP {self.pp} ({self.schedule}, {self.microbatches} micro-batches)")
        if self.cp > 1:
            parts.append(f"CP {self.cp}")
        parts.append(f"DP {self.dp}")
        return " × ".join(parts)


def check_mesh(options: Options) -> None:
    """--tp × --pp × --cp must tile --gpus; DeepSpeed's pipeline engine takes ZeRO-1 at most."""
    model = options.tp * options.pp * options.cp
    if options.gpus % model:
        raise InputError(
            f"--gpus {options.gpus} is not a multiple of --tp {options.tp} × --pp {options.pp} "
            f"× --cp {options.cp} = {model}: every data-parallel replica needs all of them",
            fix=f"use --gpus {model * max(1, options.gpus // model)} or change the degrees",
        )
    if options.pp > 1 and options.strategy in ("zero2", "zero3"):
        raise InputError(
            f"--pp {options.pp} with --strategy {options.strategy}: DeepSpeed's pipeline engine "
            "supports ZeRO stage 1 at most",
            fix="use --strategy zero1 or fsdp with --pp, or drop --pp",
        )


def pipelined_fsdp(options: Options) -> bool:
    """FSDP under a pipeline: torchtitan keeps a stage's weights gathered from forward to
    backward, and torch.distributed.pipelining syncs gradients only in the last micro-batch's
    backward, so weights are gathered and gradients reduced once per step."""
    return options.pp > 1 and options.strategy == "fsdp"


def mesh_of(options: Options) -> Mesh:
    dp = max(1, options.gpus // (options.tp * options.pp * options.cp))
    return Mesh(options.tp, options.pp, options.cp, dp, options.grad_accum, options.pp_schedule)


def check_model(mesh: Mesh, config: Any, layers: int | None, seq_len: int | None) -> None:
    """What the model must allow: heads divisible by tp, at least a layer per stage, a
    sequence that splits into cp parts. One line each, exit 2."""
    if mesh.trivial:
        return
    hidden = getattr(config, "hidden_size", None) if config is not None else None
    if not hidden or not seq_len:
        raise InputError(
            "--tp/--pp/--cp model a transformer's layers and sequence, and this model has no "
            "hidden_size and sequence length",
            fix="use a transformer preset or config.json, or data parallelism (--strategy)",
        )
    heads = int(getattr(config, "num_attention_heads", 0) or 0)
    kv_heads = hfconfig.kv_heads(config, heads)
    for count, what in ((heads, "attention heads"), (kv_heads, "key-value heads")):
        # Megatron and torchtitan give each rank whole query and key-value head groups
        if mesh.tp > 1 and count % mesh.tp:
            raise InputError(
                f"--tp {mesh.tp} does not divide the model's {count} {what}",
                fix=f"use a --tp that divides {count} (1, 2, 4, 8 ...)",
            )
    if mesh.pp > 1 and (layers or 0) < mesh.pp:
        raise InputError(
            f"--pp {mesh.pp} stages for a model of {layers or 0} layers: a stage needs a layer",
            fix=f"use --pp {max(1, layers or 1)} or fewer",
        )
    if mesh.cp > 1 and seq_len % (2 * mesh.cp):
        raise InputError(
            f"--cp {mesh.cp}: the sequence ({seq_len} tokens) must split into 2 × {mesh.cp} "
            "equal chunks (load-balanced context parallelism)",
            fix=f"use a --seq-len that is a multiple of {2 * mesh.cp}",
        )


def _stage_share(block: float, root: float, total: float, pp: int) -> float:
    """The share of `total` the largest pipeline stage holds: whole blocks, ceil(L / pp) of
    them, plus one end of the root (the embedding on the first stage, the head on the last:
    half of it each, as for untied weights)."""
    if pp == 1:
        return 1.0
    if total <= 0:
        return 1.0 / pp
    if block <= 0:
        return min(1.0, (root / 2 + max(0.0, total - root) / pp) / total)
    layers = max(1, round((total - root) / block))
    return min(1.0, (math.ceil(layers / pp) * block + root / 2) / total)


def split_sizes(sizes: Sizes, mesh: Mesh) -> Sizes:
    """One GPU's share of the weights before data-parallel sharding: the largest pipeline
    stage's blocks and its end of the root, all over tp (vocabulary-parallel embedding and
    head); a block and the root over tp only."""
    if mesh.model_split == 1:
        return sizes
    tp = mesh.tp
    trained = _stage_share(
        sizes.block_trainable, sizes.root_trainable, sizes.trainable_count, mesh.pp
    )
    frozen = _stage_share(
        sizes.block_frozen_bytes, sizes.root_frozen_bytes, sizes.frozen_bytes, mesh.pp
    )
    frozen_count = sizes.param_count - sizes.trainable_count
    return dataclasses.replace(
        sizes,
        param_count=int((sizes.trainable_count * trained + frozen_count * frozen) / tp),
        trainable_count=int(sizes.trainable_count * trained / tp),
        trainable_bytes=int(sizes.trainable_bytes * trained / tp),
        frozen_bytes=int(sizes.frozen_bytes * frozen / tp),
        block_trainable=sizes.block_trainable // tp,
        block_frozen_bytes=sizes.block_frozen_bytes // tp,
        root_trainable=sizes.root_trainable // tp,
        root_frozen_bytes=sizes.root_frozen_bytes // tp,
        state_bytes=int(sizes.state_bytes * trained / tp),
    )


def activation_scale(mesh: Mesh) -> float:
    """Traced activations of one micro-batch of the whole model -> what the first stage holds."""
    return mesh.in_flight / (mesh.tp * mesh.cp * mesh.pp)


@dataclass(frozen=True)
class Traffic:
    """Model-parallel seconds per step that nothing hides."""

    tensor_s: float
    context_s: float
    pipeline_s: float

    @property
    def total_s(self) -> float:
        return self.tensor_s + self.context_s + self.pipeline_s


def traffic(
    mesh: Mesh,
    config: Any,
    layers: int,
    batch: int,
    seq_len: int,
    compute_bytes: int,
    recompute: float,
    links_gbs: tuple[float, float, float],
    latency_s: float,
) -> Traffic:
    """Bytes each GPU moves per step in its tp, cp and pp groups, each over the link that group
    uses (`links_gbs`: GB/s of bus bandwidth of the tp group, the cp group, a pipeline send).
    `recompute`: the fraction of the layers that checkpointing replays."""
    tensor_gbs, context_gbs, pipeline_gbs = links_gbs
    if mesh.trivial:
        return Traffic(0.0, 0.0, 0.0)
    hidden = int(config.hidden_size)
    heads = int(getattr(config, "num_attention_heads", 1) or 1)
    kv_heads = hfconfig.kv_heads(config, heads)
    head_dim = int(getattr(config, "head_dim", 0) or hidden // heads)
    stage_layers = layers / mesh.pp
    tokens = batch * seq_len / mesh.cp  # one micro-batch's tokens on one GPU's sequence share
    activation = tokens * hidden * compute_bytes
    tensor = context = 0.0
    if mesh.tp > 1:
        # sequence parallel: an all-gather and a reduce-scatter around attention and around
        # the MLP, forward and backward, again forward when checkpointing replays the layer
        passes = 8 + 4 * recompute
        volume = passes * (mesh.tp - 1) / mesh.tp * activation * stage_layers
        tensor = volume / (tensor_gbs * 1e9) + passes * stage_layers * latency_s
    if mesh.cp > 1:
        kv = 2 * tokens * kv_heads * head_dim / mesh.tp * compute_bytes
        passes = 3 + recompute  # gather forward; gather + reduce-scatter backward
        volume = passes * (mesh.cp - 1) * kv * stage_layers
        context = volume / (context_gbs * 1e9) + passes * stage_layers * latency_s
    pipeline = 0.0
    if mesh.pp > 1:
        # sends along the pipeline overlap the other micro-batches' compute except while
        # it fills and drains: 2 (pp - 1) sends of one micro-batch's boundary activations
        send = activation / mesh.tp
        pipeline = 2 * (mesh.pp - 1) * (send / (pipeline_gbs * 1e9) + latency_s)
    steps = mesh.microbatches
    return Traffic(tensor * steps, context * steps, pipeline)


def scale_held(held: Held, mesh: Mesh) -> Held:
    """Held bytes from `split_sizes` are this GPU's already; the traced curves (gradients,
    optimizer temporaries, weight copies, activations) are the whole model's."""
    if mesh.trivial:
        return held
    split = mesh.model_split
    return dataclasses.replace(
        held,
        gradient_scale=held.gradient_scale / split,
        optimizer_temp_scale=held.optimizer_temp_scale / split,
        copy_scale=held.copy_scale / split,
        activation_scale=held.activation_scale * activation_scale(mesh),
    )


def scale_phases(phases: PhaseTimes, mesh: Mesh) -> PhaseTimes:
    """The traced micro-batch of the whole model -> one GPU's share of its work."""
    if mesh.trivial:
        return phases
    work, weights = mesh.compute_split, mesh.model_split
    return dataclasses.replace(
        phases,
        forward_s=phases.forward_s / work,
        backward_s=phases.backward_s / work,
        optimizer_s=phases.optimizer_s / weights,
        compute_bound_s=phases.compute_bound_s / work,
        forward_flops=phases.forward_flops / work,
        backward_flops=phases.backward_flops / work,
    )


def with_model_parallel(step: StepTime, mesh: Mesh, moved: Traffic) -> StepTime:
    """The data-parallel step of one GPU's share, plus the pipeline bubble and the
    model-parallel traffic (both idle time: the ideal step excludes them)."""
    if mesh.trivial:
        return step
    busy = mesh.microbatches * (step.forward_s + step.backward_s)
    bubble = (mesh.bubble - 1.0) * busy
    return dataclasses.replace(
        step,
        communication_s=step.communication_s + moved.total_s,
        exposed_communication_s=step.exposed_communication_s + moved.total_s,
        step_s=step.step_s + bubble + moved.total_s,
        pipeline_bubble_s=bubble,
    )

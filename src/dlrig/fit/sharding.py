"""What each GPU holds under each data-parallel strategy.

Per GPU, with N GPUs, n trainable parameters, f bytes of frozen parameters (a LoRA base),
m bytes per trainable parameter as built (4 under autocast, 2 for pure bf16), c bytes in the
compute dtype (2 for bf16/fp16, 4 for fp32), s bytes of optimizer state per parameter:

| strategy      | parameters           | gradients (peak)    | optimizer state       | transient                         |
|---------------|----------------------|---------------------|-----------------------|-----------------------------------|
| ddp           | m·n + f              | m·n                 | s·n                   | gradient buckets m·n; autocast copies |
| zero1         | c·n + f              | c·n                 | (s + 4)·n / N         | reduce + all-gather buckets       |
| zero2         | c·n + f              | c·n / N             | (s + 4)·n / N         | reduce bucket                     |
| zero3         | (c·n + f) / N        | c·n / N             | (s + 4)·n / N         | gathered units (live + prefetch)  |
| fsdp          | (m·n + f) / N        | m·n / N             | s·n / N               | gathered units + one unit's grads |
| hsdp          | as fsdp over S = GPUs per node (replicated across nodes)                      |
| fsdp-grad-op  | (m·n + f) / N        | m·n / N             | s·n / N               | every unit gathered fwd→bwd       |

ZeRO follows DeepSpeed: the module is held in the compute dtype and fp32 master weights sit
with the partitioned optimizer state ("+ 4"). FSDP follows FSDP2 with
MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=fp32): fp32 shards, compute-dtype
all-gathers, one repeated block per unit plus a root unit for the rest (embeddings, head),
which stays gathered from forward to backward. Activations never depend on the strategy;
autocast's per-layer weight copies exist only where the module itself is fp32 and unsharded
(DDP). CPU offload moves optimizer state (and with `params` the parameters and gradients) to
host RAM, which is reported per node.
"""

from __future__ import annotations

from dataclasses import dataclass

DEEPSPEED_BUCKET_ELEMENTS = 500_000_000  # reduce_bucket_size / allgather_bucket_size defaults
SHARDED = ("zero1", "zero2", "zero3", "fsdp", "hsdp", "fsdp-grad-op")
PARAMS_SHARDED = ("zero3", "fsdp", "hsdp", "fsdp-grad-op")


@dataclass(frozen=True)
class Sizes:
    """Full-model sizes (after depth extrapolation)."""

    param_count: int
    trainable_count: int
    trainable_bytes: int
    frozen_bytes: int
    block_trainable: int
    block_frozen_bytes: int
    root_trainable: int
    root_frozen_bytes: int
    state_bytes: int  # traced optimizer state (used for adafactor's factored state)


@dataclass(frozen=True)
class Plan:
    strategy: str
    gpus: int
    gpus_per_node: int
    precision: str
    optimizer: str
    offload: str = "none"
    prefetch: int = 1
    optimizer_in_backward: bool = False
    # FSDP accumulating without gradient sync (grad_accum > 1): unsharded gradients are kept
    unsynced: bool = False
    # FSDP1 units holding frozen and trainable weights (Options.fsdp_mixed_units)
    mixed_units: bool = False


@dataclass(frozen=True)
class Held:
    """Bytes per GPU outside the traced timeline, plus how the traced curves scale."""

    parameters: float
    optimizer_state: float
    buffers: float  # communication buckets
    gathered: float  # all-gathered units alive at the peak (transient)
    gradient_scale: float  # traced gradient bytes -> this strategy's gradient bytes
    optimizer_temp_scale: float
    host_bytes_per_gpu: float  # CPU offload
    shard: int  # GPUs one copy of the state is split over
    buffers_in_optimizer: bool = True  # DDP/ZeRO buckets persist; FSDP's unit gradients do not
    # optimizer state in CUDA unified memory (bitsandbytes' paged optimizers): it pages to the
    # host when the GPU runs short, so it counts in the peak but need not fit
    pageable: float = 0.0
    # optimizer in backward: the one gradient alive while its parameter steps (backward only)
    live_gradient: float = 0.0
    # the traced autocast weight copies -> this GPU's: 1 where the module is fp32 and unsharded
    # (DDP), else 0; model parallelism (fit/parallel.py) takes its share of them and of the
    # traced activations
    copy_scale: float = 1.0
    activation_scale: float = 1.0
    # FSDP1 units mixing frozen and trainable weights: the frozen weights' gradients, which
    # the trace (autograd of the frozen base) never allocates; from backward on, or the whole
    # step while gradients are kept between micro-batches
    frozen_gradients: float = 0.0


def compute_bytes(precision: str) -> int:
    return 4 if precision in ("fp32", "tf32") else 2


def state_bytes_per_param(optimizer: str, element: float) -> float:
    return {
        "sgd": 0.0,
        "sgd-momentum": element,
        "adam": 2.0 * element,
        "adamw": 2.0 * element,
        # bitsandbytes 8-bit Adam: two uint8 states plus an fp32 absmax per 2048-value block
        "adamw-8bit": 2.0 + 2 * 4 / 2048,
        "paged-adamw-8bit": 2.0 + 2 * 4 / 2048,
        "paged-adamw": 8.0,  # bitsandbytes' 32-bit state is fp32 whatever the weights are
        "adafactor": 0.0,  # factored: from the trace
    }[optimizer]


def shard_count(plan: Plan) -> int:
    if plan.strategy == "ddp":
        return 1
    if plan.strategy == "hsdp":
        return max(1, min(plan.gpus, plan.gpus_per_node))
    return max(1, plan.gpus)


def mixed_frozen_bytes(sizes: Sizes) -> float:
    """The frozen bytes in FSDP1 units that also hold trainable weights, which get gradients.
    A root unit (embeddings, head, final norm) with nothing trainable gets none."""
    if sizes.root_trainable == 0:
        return float(sizes.frozen_bytes - sizes.root_frozen_bytes)
    return float(sizes.frozen_bytes)


def held(sizes: Sizes, plan: Plan) -> Held:
    n = sizes.trainable_count
    frozen = float(sizes.frozen_bytes)
    m = sizes.trainable_bytes / n if n else 4.0
    c = float(compute_bytes(plan.precision))
    mixed = m > c
    state_full = (
        float(sizes.state_bytes)
        if plan.optimizer == "adafactor"
        else state_bytes_per_param(plan.optimizer, m) * n
    )
    shard = shard_count(plan)
    single = plan.gpus == 1 or plan.strategy == "ddp"
    bucket = c * min(n, DEEPSPEED_BUCKET_ELEMENTS)
    unit = c * sizes.block_trainable + sizes.block_frozen_bytes
    root = c * sizes.root_trainable + sizes.root_frozen_bytes
    host = 0.0
    if single:
        params, state = m * n + frozen, state_full
        grad_scale, temp_scale = 1.0, 1.0
        buffers = m * n if plan.gpus > 1 else 0.0  # DDP buckets (gradient_as_bucket_view=False)
        gathered = 0.0
        copies = True
    elif plan.strategy in ("zero1", "zero2", "zero3"):
        master = 4.0 * n if mixed else 0.0
        state = (state_full + master) / shard
        sharded_params = plan.strategy == "zero3"
        params = (c * n + frozen) / (shard if sharded_params else 1)
        grad_scale = (c / m) / (1 if plan.strategy == "zero1" else shard)
        temp_scale = 1.0 / shard
        buffers = bucket * (2 if plan.strategy == "zero1" else 1)
        gathered = unit * (1 + plan.prefetch) + root if sharded_params else 0.0
        copies = False
    else:  # fsdp, hsdp, fsdp-grad-op
        params = (m * n + frozen) / shard
        state = state_full / shard
        grad_scale, temp_scale = 1.0 / shard, 1.0 / shard
        if plan.strategy == "fsdp-grad-op":
            gathered = c * n + frozen  # SHARD_GRAD_OP keeps every unit gathered until backward
        else:
            gathered = unit * (1 + plan.prefetch) + root
        # one unit's unsharded gradients before reduce-scatter (a mixed unit's frozen part too)
        buffers = m * sizes.block_trainable + (
            float(sizes.block_frozen_bytes) if plan.mixed_units else 0.0
        )
        copies = False
    if plan.optimizer in ("adamw-8bit", "paged-adamw", "paged-adamw-8bit"):
        temp_scale = 0.0  # bitsandbytes updates each parameter in one fused kernel, in place
    if plan.unsynced:
        # set_requires_gradient_sync(False): each unit keeps its unsharded gradient (in the
        # compute dtype) until the last micro-batch reduce-scatters it
        grad_scale = c / m
    frozen_gradients = 0.0
    if plan.mixed_units and not single:  # kept unsharded without gradient sync
        frozen_gradients = mixed_frozen_bytes(sizes) / (1 if plan.unsynced else shard)
    if plan.optimizer_in_backward:
        # each gradient is freed as its parameter steps (a post-accumulate-grad hook): about
        # one tensor's gradient is alive at a time (live_gradient below)
        grad_scale, temp_scale = 0.0, 0.0
    # the largest single tensor, estimated: an untied embedding or head is half of what sits
    # outside the repeated blocks; a block's largest matrix about a quarter of the block
    largest = max(sizes.root_trainable / 2, sizes.block_trainable / 4)
    if plan.offload in ("optimizer", "params"):
        host += state
        state = 0.0
    if plan.offload == "params":
        host += params + m * n / shard  # parameters and their gradients live on the host
        host += frozen_gradients  # a mixed unit's whole flat gradient goes with them
        params = 0.0
        grad_scale = 0.0
        frozen_gradients = 0.0
    return Held(
        parameters=params,
        optimizer_state=state,
        buffers=buffers,
        gathered=gathered,
        gradient_scale=grad_scale,
        optimizer_temp_scale=temp_scale,
        copy_scale=1.0 if copies else 0.0,
        host_bytes_per_gpu=host,
        shard=shard,
        buffers_in_optimizer=plan.strategy not in ("fsdp", "hsdp", "fsdp-grad-op"),
        pageable=state if plan.optimizer.startswith("paged-") else 0.0,
        live_gradient=m * largest / shard if plan.optimizer_in_backward else 0.0,
        frozen_gradients=frozen_gradients,
    )

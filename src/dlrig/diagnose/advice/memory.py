"""Fixes for running out of memory: the GPU's (a batch that fits, other processes on the GPU)
and the host's (an allocation the host refused)."""

from __future__ import annotations

import math
import re

from dlrig.diagnose.advice.figures import DOUBT, as_figures, gib, human_size, parse_size
from dlrig.machine.model import Machine

# Other processes on the GPU, as the allocator lists them (torch >= 2.1): "Process 38 has
# 14.55 GiB memory in use." Inside a container NVML reports host PIDs, so the process itself can
# appear here too, under a PID that is not its own.
_OTHER_PROCESS = re.compile(r"Process (\d+) has ([\d.]+ ?[KMGT]?i?B) memory in use", re.I)
# Room the step cannot use: the CUDA context and allocator rounding (a few hundred MiB) and
# the variation between steps. 10% of the GPU is conservative for both.
_USABLE_FRACTION = 0.9


def _other_processes(subject: str) -> list[tuple[int, float]]:
    found = []
    for pid, size in _OTHER_PROCESS.findall(" ".join(subject.split())):
        value = parse_size(size)
        if value is not None:
            found.append((int(pid), value))
    return found


def _held(
    groups: dict[str, str], total: float, others: list[tuple[int, float]]
) -> tuple[float, str] | None:
    """What the failing process held when it ran out, and which field of the message says so."""
    in_use = parse_size(groups.get("in_use"))
    # PyTorch has printed absurd figures (exabytes) on some drivers: ignore those.
    if in_use is not None and in_use <= 2 * total:
        return in_use, "in use by this process"
    if len(others) == 1 and others[0][1] <= 2 * total:
        # A container: NVML lists this process under its host PID (no "this process" entry).
        return others[0][1], f"in use by process {others[0][0]} (this process, seen from the host)"
    free = parse_size(groups.get("free"))
    if free is not None and free <= total:
        # Older messages name no per-process figure; what the GPU had in use (every process,
        # the CUDA contexts included) is what the step competed with.
        return total - free, "in use on the GPU"
    reserved = parse_size(groups.get("reserved"))
    if reserved is not None and reserved <= 2 * total:
        return reserved, "reserved by PyTorch (the CUDA context comes on top)"
    allocated = parse_size(groups.get("allocated"))
    if allocated is not None and allocated <= 2 * total:
        return allocated, "allocated by PyTorch (its cache and the CUDA context come on top)"
    return None


# Where the log shows neither a training step nor a batch size, the batch may not be the lever:
# a model that does not load and a server at inference ran out before any training batch.
_UNKNOWN_PHASE = (
    "The log shows no training step: if it ran out while loading the model or generating, the "
    "batch is not the lever; load the weights in bf16/fp16 or quantised, spread them over the "
    'GPUs (device_map="auto" with max_memory, and no .cuda() after it) or use a larger GPU.'
)


def _batch_cut(batch: int, accum: int, usable: float, needed: float) -> tuple[int, int]:
    """(new per-GPU batch, new accumulation) that fits `usable` and keeps the global batch.

    The cut follows the need: batch × usable / needed, rounded down. Memory does not scale
    fully with the batch (weights and optimizer state stay), so this is the largest batch that
    can fit, never more. A divisor of the global batch is preferred so it stays exact.
    """
    ceiling = max(1, math.floor(batch * usable / needed))
    ceiling = min(ceiling, max(1, batch - 1))
    global_batch = batch * accum
    for candidate in range(ceiling, 0, -1):
        if global_batch % candidate == 0:
            if candidate * 2 >= ceiling:  # close enough to the ceiling
                return candidate, global_batch // candidate
            break
    return ceiling, math.ceil(global_batch / ceiling)


def _phase_advice(facts: dict[str, str]) -> str:
    """The remedy where the log shows the memory ran out outside a training step: a smaller
    training batch and more accumulation cannot help a model that does not load, or a server."""
    if facts.get("deepspeed_init_evidence"):
        # a frame of deepspeed.initialize: it ran out before the first step, even when a
        # trainer called it from its training loop
        return (
            "It ran out in deepspeed.initialize, before the first step: the weights and "
            "optimizer state do not fit, whatever the batch. Raise the ZeRO stage (3 shards "
            "the weights too), offload the optimizer state (offload_optimizer: cpu) or add GPUs."
        )
    evaluation = facts.get("evaluation_evidence")
    if evaluation:
        return (
            f"It ran out while evaluating ({evaluation}), not in a training step: run evaluation "
            "under torch.no_grad() or torch.inference_mode() with model.eval(), give it its own "
            "smaller batch (per_device_eval_batch_size; the validation DataLoader's batch_size), "
            "move outputs to the CPU as you collect them (.detach().cpu(); HF Trainer: "
            "eval_accumulation_steps), and evaluate large images in tiles or crops."
        )
    if facts.get("training_evidence"):
        return ""
    loading = facts.get("loading_evidence", "")
    if loading in ("_initialize_kv_caches", "determine_num_available_blocks"):
        return (
            "It ran out while the server sized its KV cache: stop other processes on the GPU, "
            "lower --gpu-memory-utilization (the share the cache may take), --max-model-len or "
            "--max-num-seqs, or split the model over more GPUs (--tensor-parallel-size)."
        )
    if loading:
        return (
            f"It ran out while loading the model ({loading}), before any batch: the weights do "
            "not fit. Load them in bf16/fp16 rather than fp32 (torch_dtype=torch.bfloat16), "
            'quantised (8- or 4-bit), spread over GPUs or the CPU (device_map="auto" with '
            "max_memory), or use a GPU with more memory."
        )
    if facts.get("inference_evidence"):
        return (
            "It ran out during inference (the log shows no training step): process fewer "
            "sequences or images at once and shorter ones (vLLM: --max-num-seqs, "
            "--max-model-len, --gpu-memory-utilization; generate: a smaller batch and "
            "max_new_tokens), run under torch.inference_mode() in bf16/fp16, or quantise "
            "the weights."
        )
    return ""


def _kv_cache_advice(facts: dict[str, str]) -> str:
    """vLLM found no room for its KV cache: more of the GPU, unless the log shows it had most."""
    try:
        share = float(facts.get("gpu_memory_utilization", ""))
    except ValueError:
        share = 0.0
    if share < 0.95:  # vLLM's default is 0.9, and its own advice is to raise it
        return (
            "Give vLLM more of the GPU: raise gpu_memory_utilization (e.g. 0.9 to 0.95) and stop "
            "other processes on the GPU (nvidia-smi)."
        )
    return (
        f"gpu_memory_utilization is already {share:g}, so a higher share will not find the "
        "room: vLLM's profiling run measured less free memory than that leaves. Look for another "
        "process on the GPU (nvidia-smi), skip CUDA graph capture (enforce_eager=True), lower "
        "max_num_batched_tokens, or check that the weights alone fit in that share."
    )


def _one_large_sample(shape: str) -> bool:
    """A tensor shape of batch 1 with an axis of thousands ("1,5095,3729,3")."""
    dims = [int(d) for d in re.findall(r"\d+", shape)]
    return len(dims) >= 3 and dims[0] == 1 and max(dims[1:]) >= 2048


def cuda_oom(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    out: dict[str, str] = {"kv_cache_advice": _kv_cache_advice(facts)}
    subject = groups.get("_subject", "")
    tried = parse_size(groups.get("tried"))
    total = parse_size(groups.get("total"))
    if total is None and machine and machine.gpus and machine.gpus[0].memory_total_bytes:
        total = float(machine.gpus[0].memory_total_bytes)
    allowed = parse_size(groups.get("allowed"))
    if allowed is not None and total is not None:
        total = min(total, allowed)  # set_per_process_memory_fraction caps what it may use
    others = _other_processes(subject)
    held = _held(groups, total, others) if total else None
    batch = int(facts["batch_size"]) if facts.get("batch_size", "").isdigit() else None
    accum = int(facts["grad_accum"]) if facts.get("grad_accum", "").isdigit() else 1
    free = parse_size(groups.get("free"))
    phase_advice = _phase_advice(facts)  # outside a training step, a batch cut is no remedy
    if (
        tried is not None
        and free is not None
        and allowed is None  # set_per_process_memory_fraction: the fraction is the limit
        and free >= 2 * tried
        and free >= 0.05 * (total or 0)
    ):
        # the allocator's own figures say memory was not short: a smaller batch is no remedy
        out.update(as_figures(free_bytes=free, tried_bytes=tried))
        out[DOUBT] = (
            f"the message says {human_size(free)} was free when {human_size(tried)} could not be "
            "allocated"
        )
        out["oom_batch_advice"] = (
            f"The message says {gib(free)} was free when {gib(tried)} could not be allocated: "
            "the GPU was not short of memory. Look elsewhere: another process or GPU than the "
            "one you think (nvidia-smi, CUDA_VISIBLE_DEVICES), an allocation outside PyTorch's "
            "cache (a library's workspace, a driver limit such as Windows' WDDM), or an input "
            "far larger than the rest (check the sample it failed on)."
        )
    elif tried is not None and total and held is not None:
        held_bytes, held_what = held
        foreign = (
            sum(size for pid, size in others) if held_what == "in use by this process" else 0.0
        )
        usable = _USABLE_FRACTION * (total - foreign)
        needed = held_bytes + tried
        out.update(
            as_figures(
                needed_bytes=needed,
                usable_bytes=usable,
                gpu_total_bytes=total,
                held_bytes=held_bytes,
                tried_bytes=tried,
                other_processes_bytes=foreign,
            )
        )
        lines = [
            f"The step needed at least {gib(needed)} ({gib(held_bytes)} {held_what} + "
            f"{gib(tried)} it tried to allocate) on a {gib(total)} GPU"
            + (f" of which other processes hold {gib(foreign)}" if foreign else "")
            + f"; about {gib(usable)} is usable."
        ]
        if tried >= total and not phase_advice:
            # one tensor larger than the whole GPU: a shape gone wrong as often as a batch
            lines.append(
                f"One allocation of {gib(tried)} is more than the whole GPU: check the shape of "
                "what it allocates (an input far larger than the rest, a sequence or image at "
                "full size, a broadcast or outer product that grew a dimension) before cutting "
                "the batch."
            )
        if phase_advice:
            lines.append(phase_advice)
        elif batch and batch > 1:
            new_batch, new_accum = _batch_cut(batch, accum, usable, needed)
            kept = new_batch * new_accum == batch * accum
            out.update(
                as_figures(
                    batch_size=batch,
                    new_batch_size=new_batch,
                    grad_accum=accum,
                    new_grad_accum=new_accum,
                )
            )
            lines.append(
                f"Cut the per-GPU batch from {batch} to at most {new_batch} and raise gradient "
                f"accumulation from {accum} to {new_accum} to "
                + ("keep the global batch." if kept else "keep the global batch about the same.")
            )
        elif batch == 1:
            lines.append(
                "The batch is already 1: turn on activation checkpointing, train in bf16, shard "
                "the model (FSDP/ZeRO) or use a GPU with more memory."
            )
        else:
            fraction = usable / needed
            lines.append(
                f"Cut the per-GPU batch to at most {fraction:.0%} of its current size and raise "
                "gradient accumulation by the same factor to keep the global batch."
            )
            if not facts.get("training_evidence"):
                lines.append(_UNKNOWN_PHASE)
        out["oom_batch_advice"] = " ".join(lines)
    elif phase_advice:
        out["oom_batch_advice"] = phase_advice
    elif _one_large_sample(groups.get("shape", "")) and not (batch and batch > 1):
        # TensorFlow names the tensor: a batch of one, so the sample itself is too large
        out["oom_batch_advice"] = (
            f"The tensor it failed on is one sample (shape [{groups['shape'].strip()}]): the "
            "batch is already 1, so the input is too large for this GPU. Resize or tile the "
            "inputs, or cap the size the pipeline resizes them to (a detector's maximum image "
            "dimension, a maximum sequence length)."
        )
    elif batch and batch > 1:
        # No figures in the message: halving is the only defensible step.
        out.update(
            as_figures(
                batch_size=batch,
                new_batch_size=batch // 2,
                grad_accum=accum,
                new_grad_accum=accum * 2,
            )
        )
        out["oom_batch_advice"] = (
            f"Halve the per-GPU batch ({batch} → {batch // 2}) and double gradient accumulation "
            f"({accum} → {accum * 2}) to keep the global batch (the message gives no memory figures "
            "to size the cut)."
        )
    else:
        out["oom_batch_advice"] = (
            "Halve the per-GPU batch size and double gradient accumulation steps to keep the "
            "global batch; repeat until it fits."
            + ("" if facts.get("training_evidence") else " " + _UNKNOWN_PHASE)
        )
    unallocated = parse_size(groups.get("reserved_unallocated"))
    reserved = parse_size(groups.get("reserved"))
    allocated = parse_size(groups.get("allocated"))
    if unallocated is None and reserved is not None and allocated is not None:
        unallocated = max(0.0, reserved - allocated)
    if (
        unallocated is not None
        and total
        and (unallocated >= 0.05 * total or (tried and unallocated >= tried))
    ):
        out["oom_fragmentation_advice"] = (
            f"{gib(unallocated)} is reserved by PyTorch but unallocated (fragmentation): set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before starting the job."
        )
    foreign_total = sum(size for _, size in others)
    if total and groups.get("in_use") and foreign_total >= 0.05 * total:
        listed = ", ".join(f"{pid} ({gib(size)})" for pid, size in others)
        out["oom_other_processes_advice"] = (
            f"Other processes hold {gib(foreign_total)} of this GPU: {listed}. Stop them or "
            "move the job to a free GPU (CUDA_VISIBLE_DEVICES)."
        )
    return out


def host_alloc(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    tried = parse_size(groups.get("tried"))
    if tried is None and groups.get("tried", "").isdigit():
        tried = float(groups["tried"])
    out: dict[str, str] = {"tried_said": ""}
    if tried is None:
        return out
    out["tried_said"] = f" of {human_size(tried)}"
    out.update(as_figures(tried_bytes=tried))
    ram = machine.memory.total_bytes if machine and machine.memory else None
    if ram:
        out.update(as_figures(host_memory_bytes=float(ram)))
    shape = [int(d) for d in re.findall(r"\d+", groups.get("shape", ""))]
    dtype = groups.get("dtype", "")
    # what the one array is made of, where numpy says: its longest axis, a 64-bit dtype
    detail = ""
    if shape and max(shape) >= 100_000:
        detail += (
            f" Its longest axis holds {max(shape):,} elements: an input taken whole (a long "
            "audio file, sequence or series, a large table or matrix); process it in shorter "
            "segments or chunks."
        )
    if dtype in ("float64", "complex128"):
        detail += f" It is {dtype}: {_HALF_OF[dtype]} takes half the memory."
    if (ram and tried > ram) or tried >= 2 * 1024**4:
        than = f"this machine's {human_size(float(ram))} of RAM" if ram else "a server's RAM"
        out["host_alloc_advice"] = (
            f"It asked for {human_size(tried)}, more than {than}: that is a wrong size, not a "
            "shortage. Check the shapes and dtype of the tensor created at the failing line (a "
            "dimension multiplied in twice, a sequence length or vocabulary read wrong)." + detail
        )
    elif tried >= _ONE_REQUEST_TOO_LARGE and not ram:
        out["host_alloc_advice"] = (
            f"One request of {human_size(tried)} is more than most machines have in all: the "
            "input is too large to process at once (a long video or audio file, a large image "
            "or volume, a whole dataset made into one array): process it in tiles, chunks or "
            "shorter segments (most tools have a tile or chunk option) or at a lower "
            "resolution; if the input is small, the size is wrong (check the shapes)." + detail
        )
    elif shape and max(shape) >= 100_000:
        # one array sized by a long input: shortening the input is the fix, not freeing RAM
        out["host_alloc_advice"] = (
            f"It asked for {human_size(tried)} for one array." + detail + " Otherwise free "
            "memory or raise the limit (the host, the container or the overcommit policy "
            "refused it)."
        )
    else:
        out["host_alloc_advice"] = (
            f"It asked for {human_size(tried)} of RAM and the host had less free (or the container's "
            "limit, or the overcommit policy, refused it): free memory or raise the limit." + detail
        )
    return out


# One host allocation this large is rarely a shortage to free memory for: the input is too big
# for one pass, or its size is wrong (workstations have 16-128 GiB in all).
_ONE_REQUEST_TOO_LARGE = 32 * 1024**3
_HALF_OF = {"float64": "float32", "complex128": "complex64"}

"""Fix details computed from the log's own numbers and, when given, the machine's facts.

Signatures' fix templates name variables ({oom_batch_advice}, {driver_advice}, ...); this module
computes them. A variable it cannot compute is left out, and the template line with it is
dropped rather than printed half-filled. Install commands (a torch wheel, an index, a driver)
come from `dlrig.diagnose.install`, which asks the resolver.
"""

from __future__ import annotations

import math
import re

from dlrig.diagnose import install
from dlrig.machine.model import Machine

_SIZE = re.compile(r"([\d.]+)\s*([KMGT]?i?B|bytes)", re.I)
_SCALE = {
    "b": 1,
    "bytes": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
# Other processes on the GPU, as the allocator lists them (torch >= 2.1): "Process 38 has
# 14.55 GiB memory in use." Inside a container NVML reports host PIDs, so the process itself can
# appear here too, under a PID that is not its own.
_OTHER_PROCESS = re.compile(r"Process (\d+) has ([\d.]+ ?[KMGT]?i?B) memory in use", re.I)
# Room the step cannot use: the CUDA context and allocator rounding (a few hundred MiB) and
# the variation between steps. 10% of the GPU is conservative for both.
_USABLE_FRACTION = 0.9


def parse_size(text: str | None) -> float | None:
    """ "20.00 MiB" -> bytes; "0 bytes" -> 0."""
    if not text:
        return None
    match = _SIZE.search(text)
    if not match:
        return None
    return float(match.group(1)) * _SCALE[match.group(2).lower()]


def _gib(value: float) -> str:
    return f"{value / 1024**3:.2f} GiB"


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


def cuda_oom(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    out: dict[str, str] = {}
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
    if tried is not None and total and held is not None:
        held_bytes, held_what = held
        foreign = (
            sum(size for pid, size in others) if held_what == "in use by this process" else 0.0
        )
        usable = _USABLE_FRACTION * (total - foreign)
        needed = held_bytes + tried
        lines = [
            f"The step needed at least {_gib(needed)} ({_gib(held_bytes)} {held_what} + "
            f"{_gib(tried)} it tried to allocate) on a {_gib(total)} GPU"
            + (f" of which other processes hold {_gib(foreign)}" if foreign else "")
            + f"; about {_gib(usable)} is usable."
        ]
        if batch and batch > 1:
            new_batch, new_accum = _batch_cut(batch, accum, usable, needed)
            kept = new_batch * new_accum == batch * accum
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
        out["oom_batch_advice"] = " ".join(lines)
    elif batch and batch > 1:
        # No figures in the message: halving is the only defensible step.
        out["oom_batch_advice"] = (
            f"Halve the per-GPU batch ({batch} → {batch // 2}) and double gradient accumulation "
            f"({accum} → {accum * 2}) to keep the global batch (the message gives no memory figures "
            "to size the cut)."
        )
    else:
        out["oom_batch_advice"] = (
            "Halve the per-GPU batch size and double gradient accumulation steps to keep the "
            "global batch; repeat until it fits."
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
            f"{_gib(unallocated)} is reserved by PyTorch but unallocated (fragmentation): set "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before starting the job."
        )
    foreign_total = sum(size for _, size in others)
    if total and groups.get("in_use") and foreign_total >= 0.05 * total:
        listed = ", ".join(f"{pid} ({_gib(size)})" for pid, size in others)
        out["oom_other_processes_advice"] = (
            f"Other processes hold {_gib(foreign_total)} of this GPU: {listed}. Stop them or "
            "move the job to a free GPU (CUDA_VISIBLE_DEVICES)."
        )
    return out


def _driver_cuda(groups: dict[str, str], machine: Machine | None) -> str | None:
    """The driver's CUDA level: torch's "found version 11040" is 11.4."""
    found = groups.get("found")
    if found and found.isdigit():
        value = int(found)
        return f"{value // 1000}.{(value % 1000) // 10}"
    if machine and machine.driver and machine.driver.cuda_version:
        return machine.driver.cuda_version
    return None


def driver_too_old(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    driver_cuda = _driver_cuda(groups, machine)
    out = install.for_driver(machine, driver_cuda)
    if driver_cuda:
        out["driver_cuda"] = driver_cuda
    return out


def no_kernel_image(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    out: dict[str, str] = {}
    sm = groups.get("sm")
    capability = groups.get("capability")
    if capability is None and sm and sm.startswith("sm_") and sm[3:].isdigit():
        digits = sm[3:]
        capability = f"{digits[:-1]}.{digits[-1]}"
    elif capability is None and machine and machine.gpus:
        from dlrig.knowledge import gpus as gpu_knowledge

        capability = (
            machine.gpus[0].compute_capability
            or gpu_knowledge.compute_capability(machine.gpus[0].name)[0]
        )
    out["gpu_name"] = groups.get("gpu_name", "this GPU").strip()
    out["sm"] = sm or (f"sm_{capability.replace('.', '')}" if capability else "its architecture")
    out["arch_list"] = groups.get("arch_list", "other architectures").strip()
    if capability:
        out["arch_advice"] = install.for_arch(machine, capability)
    else:
        out["arch_advice"] = (
            "Install a torch build whose architecture list includes your GPU: find the GPU's "
            "compute capability (nvidia-smi --query-gpu=name,compute_cap --format=csv) and rerun "
            "with --machine snapshot.json (dlrig doctor --save snapshot.json) for the exact command."
        )
    return out


def companions(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    return {"companion_advice": install.for_companions(machine, groups.get("torch_cuda"))}


def cpu_only(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    return {"cpu_only_advice": install.for_cpu_only(machine)}


def missing_cuda_lib(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    library = groups.get("library", "")
    out = {"library": library or "a CUDA library"}
    match = re.match(r"(?:lib)?([a-zA-Z_]+?)(?:64_|\.so\.?)(\d+)?", library)
    if not match:
        return out
    name, major = match.group(1), match.group(2)
    if name == "cuda":
        out["missing_lib_advice"] = (
            "libcuda.so is part of the NVIDIA driver, not of CUDA: the driver is missing or not on "
            "the loader path (WSL: /usr/lib/wsl/lib must be on LD_LIBRARY_PATH; containers: run "
            "with --gpus all)."
        )
    elif name.startswith("cudnn"):
        out["missing_lib_advice"] = (
            f"The program wants cuDNN {major or ''}".rstrip()
            + ": use the cuDNN your framework's wheel brings (pip show nvidia-cudnn-cu12 or -cu11) "
            "and put its lib folder on LD_LIBRARY_PATH, or install the cuDNN release of that major "
            "version for your CUDA."
        )
    elif major:
        out["missing_lib_advice"] = (
            f"The program was built for CUDA {major}: install that CUDA's runtime libraries (the "
            f"CUDA {major} toolkit, or the nvidia-*-cu{major} pip packages of a pip setup), or "
            "install a framework build for the CUDA you have."
        )
    return out


def device_assert(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    assertion = groups.get("assertion", "")
    if "n_classes" in assertion or "target" in assertion.lower():
        advice = (
            "A class label is < 0 or ≥ num_classes: check labels.min() and labels.max() against the "
            "model's number of outputs (1-based labels, a 'background' class, ignore_index=-1 instead "
            "of -100 are the usual culprits)."
        )
    elif "input_val" in assertion or "zero" in assertion:
        advice = "BCE inputs or targets are outside [0, 1]: apply sigmoid first, or use BCEWithLogitsLoss."
    elif "index" in assertion.lower() or "idx" in assertion or "range in self" in assertion:
        advice = (
            "An index into an embedding or index_select is too large: token ids ≥ the vocabulary size "
            "(call model.resize_token_embeddings(len(tokenizer)) after adding tokens) or positions ≥ "
            "max_position_embeddings (truncate inputs to the model's maximum length)."
        )
    else:
        advice = "Check that every label and index is in range for the layer that consumes it."
    return {"assert_advice": advice, "assertion": assertion or "index in range"}


def nccl_timeout(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    out = {"op": groups.get("op", "collective")}
    timeout = groups.get("timeout_ms")
    if timeout and timeout.isdigit():
        out["timeout_ms"] = timeout
        minutes = int(timeout) / 60000
        out["timeout_advice"] = (
            f"The {out['op']} waited the full {minutes:g} min timeout: a rank stopped calling "
            "collectives long before, so the network is rarely the cause."
        )
    else:
        out["timeout_ms"] = "the timeout's"
    return out


def port_in_use(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    port = groups.get("port")
    if port and port.isdigit():
        suggestion = int(port) + 1 if 1024 <= int(port) < 65535 else 29501
        advice = f"Use a free port: torchrun --master_port={suggestion} ... (or export MASTER_PORT={suggestion})"
        if int(port) < 1024:
            advice += f"; port {port} is a system port (22 is ssh): pick one above 1024"
        return {"port": port, "port_advice": advice}
    return {
        "port": "29500",
        "port_advice": "Use a free port: torchrun --master_port=29501 ... (or export MASTER_PORT=29501)",
    }


ADVISORS = {
    "cuda_oom": cuda_oom,
    "driver_too_old": driver_too_old,
    "no_kernel_image": no_kernel_image,
    "version_mismatch_torch_torchvision": companions,
    "cpu_only_torch": cpu_only,
    "missing_cuda_lib": missing_cuda_lib,
    "device_side_assert_label_range": device_assert,
    "nccl_timeout": nccl_timeout,
    "port_in_use": port_in_use,
}


def variables(
    cause: str, groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    merged = {k: v for k, v in groups.items() if not k.startswith("_")}
    advisor = ADVISORS.get(cause)
    if advisor is not None:
        merged.update(advisor(groups, facts, machine))
    return merged

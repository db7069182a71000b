"""Fix details computed from the log's own numbers and, when given, the machine's facts.

Signatures' fix templates name variables ({oom_batch_advice}, {driver_advice}, ...); this module
computes them. A variable it cannot compute is left out, and the template line with it is
dropped rather than printed half-filled.
"""

from __future__ import annotations

import math
import re

from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge import pytorch as torch_knowledge
from dlrig.knowledge.versions import Version, local_variant, minor_of, release
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


def cuda_oom(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    out: dict[str, str] = {}
    tried = parse_size(groups.get("tried"))
    total = parse_size(groups.get("total"))
    if total is None and machine and machine.gpus and machine.gpus[0].memory_total_bytes:
        total = float(machine.gpus[0].memory_total_bytes)
    in_use = parse_size(groups.get("in_use"))
    allocated = parse_size(groups.get("allocated"))
    # PyTorch has printed absurd in-use figures (exabytes) on some drivers: ignore those.
    held = next(
        (v for v in (in_use, allocated) if v is not None and total and v <= 2 * total), None
    )
    batch = int(facts["batch_size"]) if facts.get("batch_size", "").isdigit() else None
    accum = int(facts["grad_accum"]) if facts.get("grad_accum", "").isdigit() else 1
    if tried is not None and total and held is not None:
        needed = held + tried
        usable = 0.9 * total  # leave room for the CUDA context and allocator slack
        steps = max(2, math.ceil(needed / usable))
        lines = [
            f"The step needed at least {_gib(needed)} on a {_gib(total)} GPU "
            f"({_gib(held)} in use + {_gib(tried)} requested)."
        ]
        if batch:
            new_batch = max(1, batch // steps)
            lines.append(
                f"Cut the per-GPU batch from {batch} to {new_batch} and raise gradient accumulation "
                f"from {accum} to {accum * steps} to keep the global batch."
            )
        else:
            lines.append(
                f"Cut the per-GPU batch to 1/{steps} of its current size and multiply gradient "
                f"accumulation steps by {steps} to keep the global batch."
            )
        out["oom_batch_advice"] = " ".join(lines)
    elif batch:
        out["oom_batch_advice"] = (
            f"Halve the per-GPU batch ({batch} → {max(1, batch // 2)}) and double gradient "
            f"accumulation ({accum} → {accum * 2}) to keep the global batch."
        )
    else:
        out["oom_batch_advice"] = (
            "Halve the per-GPU batch size and double gradient accumulation steps to keep the "
            "global batch; repeat until it fits."
        )
    unallocated = parse_size(groups.get("reserved_unallocated"))
    reserved = parse_size(groups.get("reserved"))
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
    return out


def _driver_cuda(groups: dict[str, str]) -> str | None:
    found = groups.get("found")
    if not found or not found.isdigit():
        return None
    value = int(found)
    return f"{value // 1000}.{(value % 1000) // 10}"


def _variant_for_driver_cuda(driver_cuda: str) -> str:
    """A wheel variant a driver of this CUDA level runs (minor-version compatibility within 11+)."""
    version = Version.parse(driver_cuda)
    if version is None:
        return "cu118"
    if version.major >= 13:
        return "cu130"
    if version.major == 12:
        return "cu126" if version.minor >= 6 else "cu121"
    if version.major == 11:
        return "cu118"
    return "cu102"


def driver_too_old(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    out: dict[str, str] = {}
    driver_cuda = _driver_cuda(groups)
    if driver_cuda is None and machine and machine.driver and machine.driver.cuda_version:
        driver_cuda = machine.driver.cuda_version
    if driver_cuda:
        out["driver_cuda"] = driver_cuda
        out["driver_variant"] = _variant_for_driver_cuda(driver_cuda)
    torch = machine.frameworks.torch if machine and machine.frameworks else None
    build = torch.cuda_version if torch else None
    if torch is not None and build:
        requirement = cuda_knowledge.driver_requirement(build)
        if requirement:
            installed = (
                f" (installed: {machine.driver.version})"
                if machine and machine.driver and machine.driver.version
                else ""
            )
            out["driver_advice"] = (
                f"Upgrade the NVIDIA driver to ≥ {requirement.full_support}{installed}: torch "
                f"{torch.version} is built for CUDA {build}. The R580 long-term branch covers every "
                "CUDA 12.x and 13.x build: sudo apt install nvidia-driver-580 (then reboot)."
            )
    if "driver_advice" not in out:
        supported = (
            f"supports CUDA {driver_cuda} only" if driver_cuda else "is older than the CUDA runtime"
        )
        out["driver_advice"] = (
            f"Upgrade the NVIDIA driver: it {supported}. The R580 long-term branch covers every CUDA "
            "12.x and 13.x build: sudo apt install nvidia-driver-580 (then reboot; pass --machine "
            "snapshot.json to get the exact minimum for your torch)."
        )
    return out


def no_kernel_image(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    out: dict[str, str] = {}
    sm = groups.get("sm")
    capability = None
    if sm and sm.startswith("sm_") and sm[3:].isdigit():
        digits = sm[3:]
        capability = f"{digits[:-1]}.{digits[-1]}"
    elif machine and machine.gpus:
        from dlrig.knowledge import gpus as gpu_knowledge

        capability = (
            machine.gpus[0].compute_capability
            or gpu_knowledge.compute_capability(machine.gpus[0].name)[0]
        )
    out.setdefault("gpu_name", groups.get("gpu_name", "this GPU").strip())
    out.setdefault(
        "sm", sm or (f"sm_{capability.replace('.', '')}" if capability else "its architecture")
    )
    out.setdefault("arch_list", groups.get("arch_list", "other architectures").strip())
    torch = machine.frameworks.torch if machine and machine.frameworks else None
    if capability:
        supporting = torch_knowledge.variants_supporting(capability)
        if supporting:
            minor = minor_of(torch.version) if torch else None
            same = [e for e in supporting if e.torch_version == minor]
            pick = same[0] if same else supporting[0]
            out["arch_advice"] = (
                f"Install a build with kernels for compute capability {capability}: pip install "
                f"--force-reinstall torch=={pick.torch_version}.* torchvision torchaudio --index-url "
                f"https://download.pytorch.org/whl/{pick.cuda_variant}"
            )
        else:
            out["arch_advice"] = (
                f"No published PyTorch wheel has kernels for compute capability {capability}: build "
                f'from source with TORCH_CUDA_ARCH_LIST="{capability}" or use another GPU.'
            )
    else:
        out["arch_advice"] = (
            "Install a torch build whose architecture list includes your GPU (RTX 50xx/Blackwell: "
            "cu128 or newer wheels; GTX 10xx/Pascal and older: the cu126 wheels), see "
            "https://pytorch.org/get-started/locally/"
        )
    return out


def companions(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    torch_cuda = groups.get("torch_cuda")
    torch = machine.frameworks.torch if machine and machine.frameworks else None
    if torch:
        entry = torch_knowledge.companions().get(minor_of(torch.version) or "")
        pins = [f"torch=={release(torch.version)}"]
        if entry and entry.torchvision_version:
            pins.append(f"torchvision=={entry.torchvision_version}.*")
        if entry and entry.torchaudio_version:
            pins.append(f"torchaudio=={entry.torchaudio_version}.*")
        variant = local_variant(torch.version) or (
            f"cu{torch.cuda_version.replace('.', '')}" if torch.cuda_version else "cpu"
        )
        return {
            "companion_advice": f"Reinstall the companions for torch {torch.version}: pip install "
            f"--force-reinstall {' '.join(pins)} --index-url https://download.pytorch.org/whl/{variant}"
        }
    if torch_cuda:
        variant = "cu" + torch_cuda.replace(".", "")
        return {
            "companion_advice": f"Reinstall torchvision built for torch's CUDA {torch_cuda}: pip install "
            f"--force-reinstall torchvision --index-url https://download.pytorch.org/whl/{variant} "
            "(the same release pair as torch: torch 2.x ↔ torchvision 0.(x+15))"
        }
    return {
        "companion_advice": "Reinstall torch, torchvision and torchaudio together from one index so they "
        "match: pip install --force-reinstall torch torchvision torchaudio --index-url "
        "https://download.pytorch.org/whl/cu126 (pick the CUDA variant you use)"
    }


def missing_cuda_lib(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    library = groups.get("library", "")
    out = {"library": library or "a CUDA library"}
    match = re.match(r"lib(\w+?)\.so\.?(\d+)?", library)
    if not match:
        return out
    name, major = match.group(1), match.group(2)
    if name == "cuda":
        out["missing_lib_advice"] = (
            "libcuda.so is part of the NVIDIA driver, not of CUDA: the driver is missing or not on the "
            "loader path (WSL: /usr/lib/wsl/lib must be on LD_LIBRARY_PATH; containers: run with --gpus all)."
        )
    elif name.startswith("cudnn"):
        version = f"=={major}.*" if major else ""
        out["missing_lib_advice"] = (
            f"The program wants cuDNN {major or ''}: pip install nvidia-cudnn-cu12{version} (or -cu11 for "
            "CUDA 11 builds) and put its lib folder on LD_LIBRARY_PATH, or install the framework build "
            "that bundles it."
        )
    elif major:
        out["missing_lib_advice"] = (
            f"The program was built for CUDA {major}: install that runtime (pip install "
            f"nvidia-{name.replace('cudart', 'cuda-runtime')}-cu{major} for pip setups, or the CUDA {major} "
            "toolkit), or install a framework build for the CUDA you have."
        )
    return out


def device_assert(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    assertion = groups.get("assertion", "")
    if "n_classes" in assertion:
        advice = (
            "A class label is < 0 or ≥ num_classes: check labels.min() and labels.max() against the "
            "model's number of outputs (1-based labels, a 'background' class, ignore_index=-1 instead "
            "of -100 are the usual culprits)."
        )
    elif "srcIndex" in assertion or "index" in assertion:
        advice = (
            "An index into an embedding or index_select is too large: token ids ≥ the vocabulary size "
            "(call model.resize_token_embeddings(len(tokenizer)) after adding tokens) or positions ≥ "
            "max_position_embeddings (truncate inputs to the model's maximum length)."
        )
    elif "zero" in assertion:
        advice = "BCE inputs or targets are outside [0, 1]: apply sigmoid first, or use BCEWithLogitsLoss."
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
        suggestion = int(port) + 1 if int(port) < 65535 else 29501
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
    "missing_cuda_lib": missing_cuda_lib,
    "device_side_assert_label_range": device_assert,
    "nccl_timeout": nccl_timeout,
    "port_in_use": port_in_use,
}


def variables(
    cause: str, groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    merged = dict(groups)
    advisor = ADVISORS.get(cause)
    if advisor is not None:
        merged.update(advisor(groups, facts, machine))
    return merged

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


# Numbers a fix is built from travel beside its text, as `figures` in the JSON document
# (--json: the new micro-batch, the accumulation, the memory needed). Advisors return them under
# this prefix; `variables` splits them off.
FIGURE = "figure:"


def _figures(**values: float | int) -> dict[str, str]:
    return {FIGURE + name: repr(value) for name, value in values.items()}


def _human(value: float) -> str:
    for unit, scale in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= scale:
            return f"{value / scale:,.1f} {unit}"
    return f"{value:,.0f} bytes"


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
        out.update(
            _figures(
                needed_bytes=needed,
                usable_bytes=usable,
                gpu_total_bytes=total,
                held_bytes=held_bytes,
                tried_bytes=tried,
                other_processes_bytes=foreign,
            )
        )
        lines = [
            f"The step needed at least {_gib(needed)} ({_gib(held_bytes)} {held_what} + "
            f"{_gib(tried)} it tried to allocate) on a {_gib(total)} GPU"
            + (f" of which other processes hold {_gib(foreign)}" if foreign else "")
            + f"; about {_gib(usable)} is usable."
        ]
        if batch and batch > 1:
            new_batch, new_accum = _batch_cut(batch, accum, usable, needed)
            kept = new_batch * new_accum == batch * accum
            out.update(
                _figures(
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
        out["oom_batch_advice"] = " ".join(lines)
    elif batch and batch > 1:
        # No figures in the message: halving is the only defensible step.
        out.update(
            _figures(
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
    out = install.for_driver(
        machine, driver_cuda, (facts.get("torch_version"), facts.get("torch_variant"))
    )
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


def extension_abi(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """extension_abi_mismatch: the extension's package and how to get a build for this torch."""
    from dlrig.knowledge import extensions

    library = groups.get("library", "")
    symbol = groups.get("symbol", "")
    known = extensions.extension_for(library) if library else None
    name = extensions.module_name(library) if library else "a compiled extension"
    out = {
        "extension_module": f"{name} ({library})" if library else name,
        "demangled": (
            f"{extensions.demangle(symbol)} ({symbol})"
            if symbol and extensions.demangle(symbol) != symbol
            else symbol or "a torch library"
        ),
    }
    if known is not None:
        out["extension_advice"] = (
            f"Reinstall {known.package} for the installed torch: {known.reinstall}"
        )
    else:
        out["extension_advice"] = (
            f"Reinstall {name} in a build made for the installed torch (pip's --force-reinstall "
            "--no-cache-dir --no-build-isolation, so it is rebuilt or re-downloaded rather than "
            "taken from the cache), or rebuild it from source against this torch; a wheel names "
            "the torch it was built for in its release notes."
        )
    torch_version, _ = install._torch(machine)
    shown = f"torch {torch_version}" if torch_version else "the installed torch"
    out["extension_torch_advice"] = (
        f'Or go back to the torch release {name} was built for; compare: python -c "import '
        f'torch; print(torch.__version__, torch.version.cuda)" ({shown} is what it must match).'
    )
    return out


def glibcxx(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """glibcxx_missing: which runtime is too old and how to bring a newer one first."""
    from dlrig.knowledge import extensions

    needed = groups.get("needed", "")
    runtime = groups.get("runtime", "")
    abi = groups.get("abi", "")
    in_conda = bool(re.search(r"conda|mamba|/envs/|miniforge", runtime, re.I))
    if abi == "GLIBC":
        version = needed.split("_", 1)[-1]
        return {
            "glibcxx_advice": (
                f"{groups.get('library', 'The library')} needs glibc {version} or newer; glibc "
                "comes with the OS: use an OS (or container image) with a newer glibc, or a build "
                "of that package for this one (an older manylinux wheel, or build it here)."
            )
        }
    gcc = extensions.gcc_for(needed)
    major = gcc.split(".")[0] if gcc else None
    floor = f" (GCC {gcc} or newer)" if gcc else ""
    if in_conda:
        pin = f"'libstdcxx-ng>={major}'" if major else "libstdcxx-ng"
        text = (
            f"The conda environment's libstdc++ ({runtime}) predates {needed}{floor}: update it "
            f"with conda install -c conda-forge {pin}, or let the system's newer one load first "
            "(export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6 after checking it has "
            f"{needed})."
        )
    else:
        text = (
            f"The system's libstdc++ ({runtime or 'libstdc++.so.6'}) predates {needed}{floor}: "
            "install a newer libstdc++ (a newer OS, or conda's libstdcxx-ng in the environment "
            "and its lib folder first on LD_LIBRARY_PATH), or use a build of the library made "
            "for this OS."
        )
    return {"glibcxx_advice": text}


def shadowing(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """ld_library_path_shadowing: drop the system directory from the loader path."""
    library = groups.get("library", "")
    folder = library.rsplit("/", 1)[0] if "/" in library else ""
    where = f" ({folder})" if folder else ""
    return {
        "shadow_advice": (
            f"Take the system CUDA/cuDNN directory{where} off LD_LIBRARY_PATH for this job "
            "(unset LD_LIBRARY_PATH, or remove /usr/local/cuda*/lib64 from it in ~/.bashrc or the "
            "job script): the wheel loads the nvidia-* libraries it was built with by itself."
        )
    }


def ddp_unused(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    parameters = groups.get("parameters")
    indices = groups.get("indices")
    named = (
        f" The log names them: {parameters}."
        if parameters
        else f" The log names them by index: {indices.strip()}."
        if indices
        else ""
    )
    return {
        "ddp_unused_advice": (
            "Make every parameter contribute to the loss, set requires_grad=False on the ones "
            "you do not train before wrapping the model, or pass find_unused_parameters=True "
            "to DistributedDataParallel (Lightning: strategy='ddp_find_unused_parameters_true'; "
            f"HF Trainer: ddp_find_unused_parameters=True).{named}"
        )
    }


def host_alloc(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    tried = parse_size(groups.get("tried"))
    if tried is None and groups.get("tried", "").isdigit():
        tried = float(groups["tried"])
    out: dict[str, str] = {"tried_said": ""}
    if tried is None:
        return out
    out["tried_said"] = f" of {_human(tried)}"
    out.update(_figures(tried_bytes=tried))
    ram = machine.memory.total_bytes if machine and machine.memory else None
    if ram:
        out.update(_figures(host_memory_bytes=float(ram)))
    if (ram and tried > ram) or tried >= 2 * 1024**4:
        than = f"this machine's {_human(float(ram))} of RAM" if ram else "a server's RAM"
        out["host_alloc_advice"] = (
            f"It asked for {_human(tried)}, more than {than}: that is a wrong size, not a "
            "shortage. Check the shapes and dtype of the tensor created at the failing line (a "
            "dimension multiplied in twice, a sequence length or vocabulary read wrong)."
        )
    else:
        out["host_alloc_advice"] = (
            f"It asked for {_human(tried)} of RAM and the host had less free (or the container's "
            "limit, or the overcommit policy, refused it): free memory or raise the limit."
        )
    return out


def nccl_system(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    warn = groups.get("nccl_warn")
    return {"nccl_warn_said": f" (NCCL WARN: {warn.strip()})" if warn else ""}


_SONAME = re.compile(r"lib(?P<name>[a-zA-Z]+?)(?:64_)?\.so\.(?P<version>[\d.]+)")


def tf_libraries(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """tf_gpu_libraries_missing: every library TensorFlow could not open, and what they say."""
    listed = [name.strip() for name in groups.get("libraries", "").split(",") if name.strip()]
    out = {"libraries": ", ".join(listed) if listed else "its CUDA libraries"}
    wanted = []
    for library in listed:
        found = _SONAME.match(library)
        if not found:
            continue
        name, version = found.group("name"), found.group("version")
        if name == "cudart":
            wanted.append(f"CUDA {version}")
        elif name == "cudnn":
            wanted.append(f"cuDNN {version}")
    built = f"it was built for {' and '.join(dict.fromkeys(wanted))}: " if wanted else ""
    out["tf_libraries_advice"] = (
        f"Install the CUDA libraries this TensorFlow asks for ({built}the sonames above are "
        "exact), or install TensorFlow with them: pip install 'tensorflow[and-cuda]' (TF >= "
        "2.15); for older releases the CUDA/cuDNN pair of its tested-build table, on "
        "LD_LIBRARY_PATH."
    )
    return out


def _component_version(component: str, value: str | None) -> str | None:
    """jaxlib's integer versions: CUDA 12010 -> 12.1, cuDNN 8906 -> 8.9.6, 90100 -> 9.1.0."""
    if not value or not value.isdigit():
        return None
    number = int(value)
    if component == "CUDA":
        return f"{number // 1000}.{(number % 1000) // 10}"
    if component == "cuDNN" and number >= 10000:
        return f"{number // 10000}.{(number % 10000) // 100}.{number % 100}"
    return f"{number // 1000}.{(number % 1000) // 100}.{number % 100}"


# The pip wheel of each CUDA component jaxlib checks (the nvidia-*-cu12 packages its cuda12 extra
# installs).
_JAX_WHEELS = {
    "cuDNN": "nvidia-cudnn-cu12",
    "cuSPARSE": "nvidia-cusparse-cu12",
    "cuBLAS": "nvidia-cublas-cu12",
    "cuFFT": "nvidia-cufft-cu12",
    "cuSOLVER": "nvidia-cusolver-cu12",
    "NCCL": "nvidia-nccl-cu12",
    "CUPTI": "nvidia-cuda-cupti-cu12",
    "cuPTI": "nvidia-cuda-cupti-cu12",
    "CUDA": "nvidia-cuda-runtime-cu12",
    "NVRTC": "nvidia-cuda-nvrtc-cu12",
}


def jax_component(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    component = groups.get("component", "a CUDA component")
    found = _component_version(component, groups.get("found"))
    built = _component_version(component, groups.get("built") or groups.get("minimum"))
    parts = []
    if found:
        parts.append(f"installed {found}")
    if built:
        parts.append(f"built against {built}")
    out = {"component_versions": f" ({', '.join(parts)})" if parts else ""}
    wheel = _JAX_WHEELS.get(component)
    if wheel and built:
        out["jax_component_advice"] = (
            f"Install {component} {built} or newer where JAX finds it first: pip install -U "
            f'"jax[cuda12]" brings matching wheels (or pip install -U "{wheel}>={built}"); a '
            f"system {component} {found or ''} on LD_LIBRARY_PATH is found before them."
        ).replace("  ", " ")
    else:
        out["jax_component_advice"] = (
            f'Install the {component} JAX was built for: pip install -U "jax[cuda12]" '
            '(or "jax[cuda13]") brings matching CUDA wheels in one step.'
        )
    return out


# Import names whose pip package has another name (the usual ones in training scripts).
_PACKAGE_OF_MODULE = {
    "cv2": "opencv-python",
    "PIL": "pillow",
    "sklearn": "scikit-learn",
    "skimage": "scikit-image",
    "yaml": "pyyaml",
    "attr": "attrs",
    "bs4": "beautifulsoup4",
    "Crypto": "pycryptodome",
    "google": "protobuf",
    "tensorboardX": "tensorboardX",
    "lightning_fabric": "lightning",
    "pytorch_lightning": "pytorch-lightning",
    "llamafactory": "llamafactory",
    "flash_attn": "flash-attn",
    "mmcv": "mmcv",
    "dotenv": "python-dotenv",
    "jaxlib": "jaxlib",
    "apex": "apex (built from source: https://github.com/NVIDIA/apex)",
}


def module_missing(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    module = groups.get("module", "")
    package = _PACKAGE_OF_MODULE.get(module, module.replace("_", "-"))
    return {
        "package": package,
        "module_advice": (
            f"Install {package} with the Python that runs the job: python -m pip install "
            f"{package} (a pip, torchrun or notebook kernel of another environment installs "
            f"elsewhere); if {module} is your own code, run from its folder or fix the name."
        ),
    }


def api_mismatch(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    package = groups.get("package", "the package")
    top = package.split(".")[0]
    name = groups.get("name", "the name")
    dist = _PACKAGE_OF_MODULE.get(top, top.replace("_", "-"))
    required = groups.get("required")
    found = groups.get("found")
    if required and found:
        advice = (
            f"{package} {found} is installed but {package}{required} is required: pip install "
            f'"{package}{required}" (or the versions the project\'s requirements file pins).'
        )
    else:
        advice = (
            f"Install the {dist} release the code was written for: the project's requirements "
            f"file, or pip install -U {dist} if {name} is new (the code may come from the main "
            f"branch); check the spelling of {name} against {package}'s API."
        )
    return {"package_dist": dist, "name": name, "package": package, "api_advice": advice}


def shadow_file(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    path = groups.get("path")
    package = groups.get("package")
    if path and package:
        return {
            "package_or_folder": f"{path} (named like the package {package})",
            "shadow_file_advice": (
                f"Rename {path} (and delete the __pycache__ beside it): it is imported instead of "
                f"the installed {package}."
            ),
        }
    return {
        "package_or_folder": "folder of the package's source checkout",
        "shadow_file_advice": (
            "Run from another directory than the package's source checkout (its folder, without "
            "the compiled extensions, is imported instead of the installed package), or build it "
            "in place (pip install -e .)."
        ),
    }


def checkpoint(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    key = groups.get("load_key")
    if key == "v":
        said = " (it starts with 'v': a Git LFS pointer, 'version https://git-lfs...')"
        advice = (
            "The file is a Git LFS pointer, not the weights: git lfs install && git lfs pull "
            "(in the model's repository), or download the file itself (huggingface-cli download "
            "REPO FILE --force-download)."
        )
    elif key == "<":
        said = " (it starts with '<': an HTML page was saved in its place)"
        advice = (
            "The download saved a web page (a login, an error or a redirect page): download the "
            "file again from a direct link, with the token the site asks for."
        )
    else:
        said = f" (its first byte reads {key!r})" if key else ""
        advice = (
            "Download or save the checkpoint again and check its size against the source; a "
            "save that stopped part-way (a full disk, a killed job) leaves a truncated file, so "
            "save to a temporary name and rename when done."
        )
    return {"load_key_said": said, "checkpoint_advice": advice}


def state_dict(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    model = groups.get("model")
    unexpected = groups.get("unexpected", "")
    missing = groups.get("missing", "")
    param = groups.get("param")
    out = {"model_said": f"the model {model}" if model else "the model"}
    if param:
        out["mismatch_said"] = (
            f": {param} is {groups.get('checkpoint_shape')} in the checkpoint and "
            f"{groups.get('model_shape')} in the model"
        )
        out["state_dict_advice"] = (
            f"Build the model with the checkpoint's configuration ({param} differs: another "
            "variant, another number of classes or tokens); to load the rest into a new head on "
            "purpose, drop that key and load with strict=False."
        )
    elif unexpected.startswith("module.") and not missing.startswith("module."):
        out["mismatch_said"] = (
            ": its keys start with 'module.' (saved through DataParallel/DDP) and the model's do not"
        )
        out["state_dict_advice"] = (
            "Strip the prefix: state = {k.removeprefix('module.'): v for k, v in state.items()} "
            "(or save model.module.state_dict() next time)."
        )
    else:
        keys = ", ".join(
            k
            for k in (missing and f"missing {missing}", unexpected and f"unexpected {unexpected}")
            if k
        )
        out["mismatch_said"] = f" ({keys})" if keys else ""
        out["state_dict_advice"] = (
            "Load the checkpoint into the model it was saved from (same architecture and "
            "configuration); strict=False only where parts are new on purpose."
        )
    return out


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
    "extension_abi_mismatch": extension_abi,
    "glibcxx_missing": glibcxx,
    "ld_library_path_shadowing": shadowing,
    "ddp_unused_parameters": ddp_unused,
    "host_alloc_refused": host_alloc,
    "nccl_system_error": nccl_system,
    "tf_gpu_libraries_missing": tf_libraries,
    "jax_cuda_backend_failed": jax_component,
    "python_package_missing": module_missing,
    "package_api_mismatch": api_mismatch,
    "local_file_shadows_package": shadow_file,
    "checkpoint_corrupt": checkpoint,
    "state_dict_mismatch": state_dict,
}


def variables(
    cause: str, groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> tuple[dict[str, str], dict[str, float]]:
    """(the fix templates' values, the figures the fixes were computed from)."""
    merged = {k: v for k, v in groups.items() if not k.startswith("_")}
    figures: dict[str, float] = {}
    advisor = ADVISORS.get(cause)
    if advisor is not None:
        for key, value in advisor(groups, facts, machine).items():
            if key.startswith(FIGURE):
                figures[key[len(FIGURE) :]] = float(value)
            else:
                merged[key] = value
    return merged, figures

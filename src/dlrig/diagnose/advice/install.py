"""Fixes for a broken install: the driver, CUDA and its libraries, compiled extensions, the C++
runtime, TensorFlow's and JAX's GPU libraries, and Python packages that are missing, too old
or shadowed."""

from __future__ import annotations

import re

from dlrig.diagnose import install
from dlrig.diagnose.advice import gpu
from dlrig.diagnose.advice.figures import DOUBT
from dlrig.knowledge import cuda, extensions, provision, pytorch, rocm, versions
from dlrig.knowledge import gpus as gpu_knowledge
from dlrig.machine.model import Machine


def _driver_cuda(groups: dict[str, str], machine: Machine | None) -> str | None:
    """The driver's CUDA level: torch's "found version 11040" is 11.4."""
    found = cuda.integer_version("CUDA", groups.get("found"))
    if found:
        return found
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


def _rocm_arch_advice(machine: Machine | None) -> str:
    """A ROCm build without code for this GPU's gfx target: what to install instead."""
    gpus = (machine.gpus or ()) if machine is not None else ()
    targets = [t for g in gpus if (t := rocm.target_of(g.gfx_target, g.name))]
    overrides = [
        f"{t}: HSA_OVERRIDE_GFX_VERSION={info.override}"
        for t in dict.fromkeys(targets)
        if (info := rocm.target_info(t)) is not None and info.override
    ]
    return (
        "The ROCm build has no code for this GPU's gfx target (rocminfo | grep gfx). Use a "
        "build that carries it: an official torch ROCm wheel where the GPU is supported, or "
        "torch built from source with PYTORCH_ROCM_ARCH=<gfx target>. For consumer Radeon "
        "cards ROCm does not support, users report `export HSA_OVERRIDE_GFX_VERSION=10.3.0` "
        "(RDNA2, gfx103x) or 11.0.0 (RDNA3) working; AMD does not support it"
        + (f" ({'; '.join(overrides)})." if overrides else ".")
        + " On a machine that also has an integrated AMD GPU (an APU), HIP may have picked it: "
        "select the discrete GPU with HIP_VISIBLE_DEVICES (rocminfo lists the agents)."
    )


def no_kernel_image(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    out: dict[str, str] = {}
    arch = groups.get("arch", "")
    if arch.startswith(("compute_", "sm_")):
        # before the returns below: nvcc's refusal can share a log with a kernel-image error
        out["toolchain_advice"] = gpu.toolchain_arch_advice(arch)
    if groups.get("tf_capability") and facts.get("tf_gpu_created"):
        # TensorFlow skipped one GPU and made a device of another
        out[DOUBT] = (
            f"TensorFlow created a GPU device all the same ({facts['tf_gpu_created']}): "
            "another GPU ran"
        )
    wanted, built = groups.get("wanted"), groups.get("built")
    if wanted and built:
        # CUTLASS's guard prints __CUDA_ARCH__ itself (750 for sm75) or the sm number (121)
        if len(built) == 3 and built.endswith("0") and int(built) >= 300:
            built = built[:-1]
        out["arch_said"] = f"sm{wanted} GPUs ran code compiled for sm{built}"
    sm = groups.get("sm")
    capability = groups.get("capability")
    if capability is None and sm and sm.startswith("sm_") and sm[3:].isdigit():
        digits = sm[3:]
        capability = f"{digits[:-1]}.{digits[-1]}"
    elif capability is None and machine and machine.gpus:
        capability = (
            machine.gpus[0].compute_capability
            or gpu_knowledge.compute_capability(machine.gpus[0].name)[0]
        )
    if groups.get("hip") and facts.get("nvidia_gpu"):
        # a ROCm build's loader on a machine whose log names an NVIDIA GPU: the wrong build
        out["arch_advice"] = (
            f"The log names an NVIDIA GPU ({facts['nvidia_gpu'].strip()}) and the installed torch "
            "is a ROCm (AMD) build: pip uninstall -y torch torchvision torchaudio, then install "
            "the CUDA build (https://pytorch.org/get-started/locally/; pip install torch "
            "--index-url https://download.pytorch.org/whl/cu126 for a driver of CUDA 12.6 or later)."
        )
        return out
    if groups.get("triton"):
        out["arch_advice"] = (
            "The kernel without code for this GPU is one Triton compiled (torch.compile, a Triton "
            "kernel of a library), not torch's own: install the torch and triton pair made for "
            "this GPU (pip install -U torch brings the triton it pins; Blackwell GPUs need triton "
            "3.3 or later), then clear Triton's cache (rm -rf ~/.triton/cache)."
        )
        return out
    if groups.get("hip"):
        out["arch_advice"] = _rocm_arch_advice(machine)
        out["arch_rebuild_advice"] = (
            "For a custom extension (flash-attn, bitsandbytes, vllm): rebuild it for your GPU "
            "with PYTORCH_ROCM_ARCH set to its gfx target, e.g. PYTORCH_ROCM_ARCH=gfx90a pip "
            "install --no-build-isolation --no-cache-dir <package>"
        )
        return out
    out["arch_rebuild_advice"] = (
        "For a custom extension (flash-attn, apex, mmcv): rebuild it with TORCH_CUDA_ARCH_LIST "
        'set to your GPU, e.g. TORCH_CUDA_ARCH_LIST="8.6" pip install --no-build-isolation '
        "--no-cache-dir <package>"
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
    if facts.get("macos_evidence"):
        # torch has no CUDA on a Mac: the code, not the build, has to change
        return {
            "cpu_only_advice": "This is a Mac, where torch has no CUDA: run on Apple's GPU with "
            "device 'mps' (torch.backends.mps.is_available()) or on the CPU, by the program's "
            "device option or by replacing .cuda() / device='cuda' in the code; code that calls "
            "torch.cuda unconditionally (a sampler, a custom kernel) needs that fixed upstream."
        }
    accelerator = facts.get("accel_evidence")
    if accelerator:
        # the vendor's torch has no CUDA by design: a CUDA build is not the fix
        return {
            "cpu_only_advice": f"The log shows another accelerator's stack ({accelerator}), "
            "whose torch is built without CUDA: the code or a library took a CUDA path. Use that "
            "accelerator's device (Ascend: import torch_npu and device 'npu', or "
            "torch_npu.contrib.transfer_to_npu to map CUDA calls; Gaudi: 'hpu'; Intel GPUs: "
            "'xpu'; TPU: torch_xla's device), and keep the vendor's extension at the release "
            "made for the installed torch and library."
        }
    built = re.fullmatch(r"(\d+\.\d+\.\d+)\+(cu\d{3,4})", groups.get("built", ""))
    if built:
        # xFormers names the CUDA torch it was compiled for: that build, not the newest
        exact = install.for_build(machine, built.group(1), built.group(2))
        if exact:
            return {"cpu_only_advice": exact}
    return {"cpu_only_advice": install.for_cpu_only(machine)}


def extension_abi(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """extension_abi_mismatch: the extension's package and how to get a build for this torch."""
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
    elif runtime.startswith("/") and not re.match(r"/(?:usr/)?lib(?:64|32)?/", runtime):
        # a compiler's or an application's own copy found first (an HPC module's GCC, spack, a
        # toolkit's bundled runtime): the program was built with a newer GCC than that one
        # the last GCC the path names is the one whose lib64 it is (spack nests a compiler's
        # directory under the compiler that built it: gcc-4.8.5/gcc-10.2.0-hash/lib64)
        owners = re.findall(r"gcc[-/](\d+(?:\.\d+)*)", runtime)
        what = f"GCC {owners[-1]}'s own" if owners else "not the system's but a copy"
        text = (
            f"The libstdc++ loaded first is {what} ({runtime}), found before the system's "
            "(through LD_LIBRARY_PATH, which a module or an environment sets, or the loader's "
            "configuration), and it "
            f"predates {needed}{floor}: the program was built with a newer GCC. Put the lib64 "
            "of the GCC it was built with first on LD_LIBRARY_PATH (module load that GCC), or "
            "rebuild the program with the GCC whose runtime loads."
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
    found = cuda.integer_version(component, groups.get("found"))
    built = cuda.integer_version(component, groups.get("built") or groups.get("minimum"))
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


def no_driver(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """'No driver' beside nvidia-smi's own header: the driver answered where nvidia-smi ran, so
    the claim is in doubt, and the build's CUDA against the driver's is the first thing to check."""
    driver = facts.get("smi_driver")
    if not driver:
        return {}
    smi_cuda = facts.get("smi_cuda")
    supports = f" (it supports CUDA up to {smi_cuda})" if smi_cuda else ""
    build = facts.get("torch_variant", "")
    build_cuda = f"{build[2:-1]}.{build[-1]}" if re.fullmatch(r"cu\d{3,4}", build) else None
    if build_cuda and smi_cuda and versions.compare(build_cuda, smi_cuda) > 0:
        first = (
            f"torch {facts.get('torch_version', '')}+{build} is built for CUDA {build_cuda}, newer "
            f"than driver {driver} supports ({smi_cuda}): update the driver, or install torch "
            f"built for CUDA {smi_cuda} or older."
        )
    else:
        against = smi_cuda or "the driver's"
        first = (
            "Compare the CUDA this program's build needs (python -c \"import torch; "
            f'print(torch.version.cuda)") with {against}: a newer build needs a '
            "newer driver or a build for the older CUDA."
        )
    return {
        "smi_driver_advice": f"nvidia-smi in this log shows driver {driver}{supports}. {first} "
        "If they agree, this process does not see the GPU nvidia-smi sees: CUDA_VISIBLE_DEVICES, "
        "a container started without --gpus, or another machine or session.",
        DOUBT: f"nvidia-smi in this log shows driver {driver} answering, so a missing driver "
        "is not shown",
    }


def torch_wheel(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """The torch releases with wheels for the Python the log shows."""
    notes: list[str] = []
    if groups.get("available", "").strip() == "none":
        notes.append(
            "pip saw no torch wheel at all ('from versions: none'): besides an unsupported "
            "Python or platform, an index it cannot reach (no network, a proxy, a mirror without "
            "torch) looks the same; pip download torch --no-deps -d /tmp/t -v shows which"
        )
    if "+cu" in groups.get("requirement", ""):
        notes.append(
            "a +cuXXX build is on download.pytorch.org's index for that CUDA "
            "(--index-url https://download.pytorch.org/whl/cuXXX), for Linux and Windows x86-64 "
            "only, never on PyPI"
        )
    python = facts.get("python_version")
    if python:
        releases = provision.torch_releases_for_python(python)
        newest = provision.torch_python(pytorch.releases()[-1])
        if releases:
            notes.append(
                f"for Python {python} the releases dlrig's table lists with wheels are torch "
                f"{releases[0]} to {releases[-1]} (older ones are not in the table)"
            )
        elif newest:
            notes.append(
                f"no torch release in dlrig's table has wheels for Python {python}; the newest "
                f"supports Python {newest[0]} to {newest[1]}"
            )
    if not notes:
        return {}
    text = "; ".join(notes)
    return {"torch_wheel_advice": text[0].upper() + text[1:] + "."}

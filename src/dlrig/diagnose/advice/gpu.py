"""Fixes for the GPU libraries' and compilers' own failures, by the status or the kind they
report: cuDNN's BAD_PARAM is the call's arguments, its INTERNAL_ERROR most often memory;
torch.compile's failure names the part (Dynamo, the backend, the C++ compiler, the Python)."""

from __future__ import annotations

from dlrig.knowledge import cuda
from dlrig.knowledge.pytorch import compile_python_support
from dlrig.machine.model import Machine


def cudnn(groups: dict[str, str], facts: dict[str, str], machine: Machine | None) -> dict[str, str]:
    status = groups.get("status", "")
    if status.startswith("BAD_PARAM"):
        first = (
            "cuDNN rejected the call's arguments (BAD_PARAM): look at the input of the failing "
            "line first: an empty batch (x.shape[0] == 0: a slice, a split or a filter that left "
            "no samples), or a shape, dtype or layout the operation does not take (print its "
            "shape and dtype there). An old framework beside a newer system cuDNN fails the same "
            "way (next fix)."
        )
    elif status.startswith("NOT_SUPPORTED"):
        first = (
            "cuDNN has no kernel for this configuration (NOT_SUPPORTED): make the input "
            "contiguous (x.contiguous()), try float32 instead of half precision, and, to confirm, "
            "torch.backends.cudnn.enabled = False."
        )
    elif groups.get("engine"):
        first = (
            "No cuDNN engine takes this operation: most often a cuDNN other than the one the "
            "framework was built with (a system or second cuDNN first on the loader path; check "
            "torch.backends.cudnn.version()), or an input shape or dtype it has no kernel for; a "
            "smaller batch helps when the workspace is what is missing."
        )
    else:
        first = (
            "Retry with a smaller batch: CUDNN_STATUS_INTERNAL_ERROR / NOT_INITIALIZED and "
            "'unable to find a valid cuDNN algorithm' are often memory; for TensorFlow allow "
            "memory growth (tf.config.experimental.set_memory_growth)."
        )
    why = (
        " It refused the call's arguments: the input, or a cuDNN that does not match the framework."
        if status.startswith(("BAD_PARAM", "NOT_SUPPORTED"))
        else " It is often an out-of-memory in disguise, or a cuDNN that does not match the framework."
    )
    out = {"cudnn_first": first, "cudnn_why": why}
    if status:
        out["status"] = status
    return out


def compile_failure(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    kind, python = groups.get("kind", ""), groups.get("python", "")
    if python:
        first = compile_python_support().get(python)
        release = f"torch {first} or later" if first else "a later torch release"
        return {
            "compile_said": f": this torch does not support torch.compile on Python {python} and later",
            "compile_advice": f"Use a torch release whose compile supports Python {python} "
            f"({release}; wheels for a Python can come before compile's support of it), or "
            "run under an older Python, or without torch.compile.",
        }
    if groups.get("windows") or kind in ("InvalidCxxCompiler", "CppCompileError"):
        return {
            "compile_said": ": its backend could not build code on this machine",
            "compile_advice": "Inductor needs a working C++ compiler for CPU code and Triton for "
            "GPU code: install one (Linux: g++; Windows: the Visual Studio Build Tools, run from "
            "their developer prompt, and triton-windows for the GPU), or compile with another "
            "backend (torch.compile(model, backend='aot_eager')) or none.",
        }
    if kind == "Unsupported":
        return {
            "compile_said": ": TorchDynamo met code it cannot trace",
            "compile_advice": "Find the construct in the message above the traceback (a "
            "data-dependent branch, a call into a C extension or NumPy, a generator): mark that "
            "function @torch.compiler.disable, compile a smaller module, or upgrade torch, "
            "whose later releases trace more.",
        }
    backend = groups.get("backend")
    return {
        "compile_said": f" in its backend ({backend})" if backend else "",
        "compile_advice": "Read the error compile wraps (after 'raised:', or in the lines above "
        "the traceback: a Triton or C++ compile error, a missing kernel for an op or dtype); "
        "most are bugs of that torch release: upgrade torch, or leave the failing module "
        "uncompiled.",
    }


# What each dtype the MPS backend refuses needs instead (the dtype as torch names it).
_MPS_DTYPES = {
    "float64": "cast to float32 before moving it to 'mps' (tensor.float(); numpy arrays are "
    "float64 by default: np.float32 at creation or .astype(np.float32); "
    "torch.set_default_dtype(torch.float32)), or run the part that needs float64 on the CPU",
    "double": "cast to float32 before moving it to 'mps' (tensor.float(); numpy arrays are "
    "float64 by default: .astype(np.float32)), or run the part that needs float64 on the CPU",
    "bfloat16": "use float16 or float32 on MPS (torch_dtype=torch.float16), or a newer macOS "
    "(14 or later) and torch, whose MPS backend has bfloat16",
}


def mps(groups: dict[str, str], facts: dict[str, str], machine: Machine | None) -> dict[str, str]:
    op, dtype = groups.get("op", ""), groups.get("dtype", "")
    if op:
        return {
            "mps_said": f"PyTorch's MPS backend (an Apple-silicon GPU) has no kernel for {op}.",
            "mps_advice": "Set PYTORCH_ENABLE_MPS_FALLBACK=1 in the environment before Python "
            f"starts (export PYTORCH_ENABLE_MPS_FALLBACK=1): {op} then runs on the CPU and the "
            "rest on the GPU; or upgrade torch, whose later releases implement more operators "
            "on MPS (pytorch/pytorch#77764 lists the missing ones).",
        }
    if not dtype:
        return {}
    key = dtype.lower()
    if key.startswith("float8"):
        advice = (
            f"{dtype} weights do not run on MPS: load the model in float16 or float32 (an "
            "fp16/bf16 checkpoint of it, not the fp8 one), or run it on a CUDA GPU"
        )
    else:
        advice = _MPS_DTYPES.get(
            key,
            "convert the tensor to a dtype MPS has (float32, float16, int32) before moving it "
            f"to 'mps', or compute the {dtype} part on the CPU",
        )
    return {
        "mps_said": f"PyTorch's MPS backend (an Apple-silicon GPU) has no {dtype} tensors.",
        "mps_advice": advice[0].upper() + advice[1:] + ".",
    }


def toolchain_arch_advice(arch: str) -> str:
    """nvcc or ptxas refused an architecture: too new for this toolkit, or removed from it
    (cuda_arch_support.csv): a build asking for compute_35 with CUDA 12 needs the opposite fix
    of one asking for compute_89 with CUDA 11.7."""
    digits = arch.split("_", 1)[1]
    # sm_90a, sm_100f: architecture- and family-specific targets came later than the plain one
    # (CUDA 12.0 for sm_90a, 12.9 for the f ones), which the table does not list: no figure
    capability = f"{digits[:-1]}.{digits[-1]}" if digits.isdigit() and len(digits) >= 2 else ""
    events = {e.event: e for e in cuda.arch_events() if e.compute_capability == capability}
    removed, added = events.get("removed"), events.get("added")
    if removed is not None:
        return (
            f"{arch} (compute capability {capability}) was removed from CUDA in "
            f"{removed.cuda_version.truncated(2)}: this nvcc is too new for it, and the build asks "
            "for it. Take it out of the architectures the build names (TORCH_CUDA_ARCH_LIST, "
            "CMAKE_CUDA_ARCHITECTURES, -gencode flags in setup.py, a Makefile or build file), or "
            f"build with a CUDA older than {removed.cuda_version.truncated(2)} if a GPU of that "
            "generation must run it."
        )
    if added is not None:
        return (
            f"{arch} (compute capability {capability}) needs CUDA {added.cuda_version.truncated(2)} "
            "or later, and this nvcc is older: install a newer CUDA toolkit and make the build "
            "use it (CUDA_HOME, PATH; nvcc --version shows which one runs), or leave "
            f"{capability} out of the architectures the build names."
        )
    suffix = (
        f" {arch} is an architecture-specific target: those need CUDA 12.0 or later (sm_90a), "
        "the family ones 12.9 (sm_100f)."
        if digits[-1:].isalpha()
        else ""
    )
    return (
        "Use a CUDA toolkit (nvcc) and Triton new enough for the GPU: CUDA >= 11.8 for "
        "sm_89/sm_90, >= 12.8 for Blackwell (sm_100/sm_120); pip wheels of torch >= 2.7 bundle "
        "a matching Triton/ptxas." + suffix
    )


def cudnn_versions(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    return {
        key: cuda.integer_version("cuDNN", groups[key]) or groups[key]
        for key in ("built", "found")
        if groups.get(key)
    }

"""The text of `python -m torch.utils.collect_env`, as pasted into bug reports -> Machine.

Real pastes are messy: the layout changed across PyTorch releases (Yes/No became True/False,
the CPU block and XPU lines were added), people paste with full-width colons or inside
markdown, and warnings printed by `import torch` land in the middle of the output. Those
warnings are evidence too ("sm_120 is not compatible ...", "driver ... too old (found version
11040)", "Driver/library version mismatch"), so the reader keeps what they say.
"""

from __future__ import annotations

import re

from dlrig.machine.model import (
    CudaToolkit,
    Driver,
    Frameworks,
    Gpu,
    Machine,
    Origin,
    OsInfo,
    TorchInfo,
)
from dlrig.machine.readers import collect_env_blocks as blocks_of
from dlrig.machine.readers.common import catalogue_id_for, recorded_only_issues

_KEYS = (
    "PyTorch version",
    "Is debug build",
    "CUDA used to build PyTorch",
    "ROCM used to build PyTorch",
    "OS",
    "GCC version",
    "Clang version",
    "CMake version",
    "Libc version",
    "Python version",
    "Python platform",
    "Is CUDA available",
    "CUDA runtime version",
    "CUDA_MODULE_LOADING set to",
    "GPU models and configuration",
    "Nvidia driver version",
    "cuDNN version",
    "HIP runtime version",
    "MIOpen runtime version",
    "Is XNNPACK available",
    "Is XPU available",
    "XPU used to build PyTorch",
    "Intel GPU driver version",
    "Intel GPU models onboard",
    "Intel GPU models detected",
    "CPU",
    "Versions of relevant libraries",
    "Version of relevant libraries",
)
_KEY_LINE = re.compile(
    r"^\s*(?P<key>"
    + "|".join(re.escape(k) for k in _KEYS)
    + r")\s*(?::(?P<value>.*)|\s(?P<bare>\d.*))?$",
    re.I,
)
_CANONICAL = {key.lower(): key for key in _KEYS}
_CANONICAL["version of relevant libraries"] = "Versions of relevant libraries"
_NOT_COLLECTED = {"could not collect", "n/a", "none", "", "no cuda", "not available"}

_ARCH_WARNING = re.compile(
    r"(?P<gpu>[^\n]*?) with CUDA capability sm_(?P<sm>\d+) is not compatible with the current "
    r"PyTorch installation\.?\s*\n?\s*The current PyTorch install supports CUDA capabilities "
    r"(?P<archs>(?:(?:sm|compute)_\w+\s*)+)",
    re.S,
)
_DRIVER_TOO_OLD = re.compile(r"driver on your system is too old \(found version (?P<v>\d+)\)")
_NVML_ERROR = re.compile(r"Failed to initialize NVML: (?P<msg>[^\n]+)")
_NO_DRIVER = re.compile(
    r"Found no NVIDIA driver on your system|couldn't communicate with the NVIDIA driver"
)


def looks_like(text: str) -> bool:
    head = _normalise(text[:100_000])
    return bool(re.search(r"PyTorch version\s*:?\s*\S", head)) and (
        "CUDA used to build PyTorch" in head or "Is CUDA available" in head
    )


_QUOTE = re.compile(r"^[ \t]*>[ \t]?")


def _normalise(text: str) -> str:
    # Full-width colons appear in pastes from some locales/input methods.
    text = text.replace("\uff1a", ":").replace("\r\n", "\n").replace("\r", "\n")
    # A paste quoted in Markdown ("> PyTorch version: ...") on most of its lines: unquote it.
    lines = text.split("\n")
    filled = [line for line in lines if line.strip()]
    if filled and sum(1 for line in filled if _QUOTE.match(line)) >= 0.8 * len(filled):
        text = "\n".join(_QUOTE.sub("", line, count=1) for line in lines)
    return text


# Emphasis or inline-code marks a user wrapped around lines ("**Is CUDA available: Yes").
_EMPHASIS = re.compile(r"^(\s*)[*`]+|[*`]+\s*$")


def _strip_markdown(line: str) -> str:
    line = line.rstrip()
    if line.strip().startswith("```"):
        return ""
    return _EMPHASIS.sub(lambda m: m.group(1) or "", line)


_BANNER = re.compile(r"^\s*={10,}\s*$")
_SECTION_TITLES = {
    "cpu info": "CPU",
    "versions of relevant libraries": "Versions of relevant libraries",
}


def parse_fields(text: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Single-line values by key, and the continuation lines that follow each key."""
    fields: dict[str, str] = {}
    blocks: dict[str, list[str]] = {}
    current: str | None = None
    after_banner = titled = False
    for raw in _normalise(text).split("\n"):
        line = _strip_markdown(raw)
        if _BANNER.match(line):
            # vLLM's sectioned layout: "=====" / "  CPU Info" / "=====" open a section; the
            # banner under a title keeps it, any other banner ends the section before it.
            current = current if titled else None
            after_banner, titled = not titled, False
            continue
        title = _SECTION_TITLES.get(line.strip().lower()) if after_banner else None
        after_banner = titled = False
        if title:
            current, titled = title, True
            fields.setdefault(title, "")
            blocks.setdefault(title, [])
            continue
        match = _KEY_LINE.match(line)
        if match and (match.group("value") is not None or match.group("bare") is not None):
            current = _CANONICAL[match.group("key").lower()]
            value = (
                match.group("value") if match.group("value") is not None else match.group("bare")
            )
            # Keep the first occurrence: a paste sometimes repeats a block.
            fields.setdefault(current, value.strip())
            blocks.setdefault(current, [])
            continue
        if current is not None and line.strip():
            blocks[current].append(line.strip())
        elif not line.strip() and current not in (
            "CPU",
            "Versions of relevant libraries",
            "GPU models and configuration",
            "cuDNN version",
        ):
            current = None
    return fields, blocks


def _value(fields: dict[str, str], key: str) -> str | None:
    value = fields.get(key)
    if value is None or value.strip().lower() in _NOT_COLLECTED:
        return None
    return value.strip()


def _bool(fields: dict[str, str], key: str) -> bool | None:
    value = (_value(fields, key) or "").lower()
    if value in {"true", "yes"}:
        return True
    if value in {"false", "no"}:
        return False
    return None


# ROCm builds print the ISA after the name: "AMD Instinct MI210 (gfx90a:sramecc+:xnack-)".
_AMD_GPU = re.compile(r"\b(AMD|Radeon|Instinct)\b|\(gfx[0-9a-f]+")
_GFX_SUFFIX = re.compile(r"\s*\((gfx[0-9a-f]+)[^)]*\)\s*$")


def _gpu(index: int, name: str) -> Gpu:
    suffix = _GFX_SUFFIX.search(name)
    if suffix or _AMD_GPU.search(name):
        bare = name[: suffix.start()].strip() if suffix else name
        return Gpu(
            index=index,
            name=bare,
            vendor="amd",
            gfx_target=suffix.group(1) if suffix else None,
            catalogue_id=catalogue_id_for(bare),
        )
    return Gpu(index=index, name=name, catalogue_id=catalogue_id_for(name))


def _gpus(
    fields: dict[str, str], blocks: dict[str, list[str]], text: str
) -> tuple[Gpu, ...] | None:
    lines = []
    first = _value(fields, "GPU models and configuration")
    if first:
        lines.append(first)
    lines.extend(blocks.get("GPU models and configuration", []))
    gpus = []
    for line in lines:
        match = re.match(r"^GPU (\d+):\s*(.+?)(?:\s*\(UUID:.*\))?$", line.strip())
        if match:
            gpus.append(_gpu(int(match.group(1)), match.group(2).strip()))
        elif not gpus and line.strip() and not line.strip().startswith("GPU"):
            # Single-GPU outputs of some releases print just the name.
            name = line.strip()
            if re.search(
                r"\b(NVIDIA|GeForce|Tesla|Quadro|RTX|GTX|A\d{2,3}|H\d{3}|L\d{1,2})\b", name
            ) or _AMD_GPU.search(name):
                gpus.append(_gpu(0, name))
    if not gpus:
        return None
    # A paste cut mid-line leaves its last GPU as a prefix ("GPU 7: NVID") of a listed name.
    names = {g.name for g in gpus}
    for i, gpu in enumerate(gpus):
        longer = sorted(n for n in names if n != gpu.name and n.startswith(gpu.name))
        if longer:
            gpus[i] = _gpu(gpu.index, longer[0])
    arch = _ARCH_WARNING.search(text)
    if arch:
        sm = arch.group("sm")
        capability = f"{sm[:-1]}.{sm[-1]}"
        warned_name = arch.group("gpu").strip().split("UserWarning:")[-1].strip()
        updated = []
        for gpu in gpus:
            if warned_name.endswith(gpu.name) or gpu.name in warned_name or len(gpus) == 1:
                gpu = Gpu(**{**gpu.__dict__, "compute_capability": capability})
            updated.append(gpu)
        gpus = updated
    return tuple(gpus)


_VARIANT = re.compile(r"\+(cu\d+|cpu|rocm[\d.]*|xpu)\b")


def _build(fields: dict[str, str], torch_version: str) -> tuple[str | None, bool | None]:
    """(cuda | rocm | xpu | cpu | None, whether CUDA parts were found) from the build lines.

    torch/utils/collect_env.py prints torch.version.cuda ('12.1'); 'N/A' for ROCm builds; and
    for a torch without CUDA (torch.version.cuda is None) 'None' only when it found no nvcc, no
    `nvidia-smi -L` GPU and no driver (it then writes 'No CUDA' on those lines too), else 'Could
    not collect'. A paste cut before the line says nothing: the build stays unknown.
    """
    raw = fields.get("CUDA used to build PyTorch")
    hip = _value(fields, "ROCM used to build PyTorch") or _value(fields, "HIP runtime version")
    variant = _VARIANT.search(torch_version)
    tag = variant.group(1) if variant else None
    xpu = tag == "xpu" or _bool(fields, "Is XPU available") is True
    value = (raw or "").strip().lower()
    if raw is not None and value not in _NOT_COLLECTED:
        return "cuda", None
    if hip or (tag or "").startswith("rocm"):
        return "rocm", None
    if (
        value == "could not collect"
        and not (tag or "").startswith("cu")
        and _bool(fields, "Is CUDA available") is True
        and not xpu
    ):
        # torch.cuda answered True with torch.version.cuda None: a HIP build whose collect_env
        # predates its ROCm lines (torch < 1.5 printed none; ROCm/pytorch#356's torch 1.1)
        return "rocm", None
    if raw is None or value in {"", "n/a"}:
        if tag and tag.startswith("cu"):
            return "cuda", None
        return ("cpu" if tag == "cpu" else ("xpu" if xpu else None)), None
    found = value == "could not collect" or None
    if xpu:
        return "xpu", found  # Intel GPU builds have no CUDA either, but are not CPU-only
    return "cpu", found


def _torch(
    fields: dict[str, str], clean: str, torch_version: str, installer: str | None
) -> TorchInfo:
    build, cuda_parts_found = _build(fields, torch_version)
    arch_warning = _ARCH_WARNING.search(clean)
    return TorchInfo(
        version=torch_version,
        build=build,
        cuda_version=_value(fields, "CUDA used to build PyTorch") if build == "cuda" else None,
        hip_version=_value(fields, "ROCM used to build PyTorch")
        or _value(fields, "HIP runtime version"),
        arch_list=tuple(arch_warning.group("archs").split()) if arch_warning else None,
        cuda_available=_bool(fields, "Is CUDA available"),
        installer=installer,
        cuda_parts_found=cuda_parts_found,
    )


def read(text: str, path: str | None) -> Machine:
    clean = _normalise(text)
    fields, blocks = parse_fields(clean)
    torch_version = _value(fields, "PyTorch version")
    present = []

    os_field = _value(fields, "OS")
    platform_field = _value(fields, "Python platform") or ""
    kernel = re.search(r"Linux-(.+?)-(?:x86_64|aarch64|ppc64le)", platform_field)
    arch = re.search(r"\((x86_64|aarch64|ppc64le|arm64|AMD64)\)", os_field or "")
    libc = re.search(r"glibc-([\d.]+)", _value(fields, "Libc version") or "")
    python = re.match(r"([\d.]+)", _value(fields, "Python version") or "")
    os_info = OsInfo(
        name=re.sub(r"\s*\((x86_64|aarch64|ppc64le|arm64|AMD64)\)\s*$", "", os_field)
        if os_field
        else None,
        kernel_release=kernel.group(1) if kernel else None,
        glibc_version=libc.group(1) if libc else None,
        architecture=arch.group(1) if arch else None,
        python_version=python.group(1) if python else None,
    )
    present.append("os")

    driver_version = _value(fields, "Nvidia driver version")
    too_old = _DRIVER_TOO_OLD.search(clean)
    driver_cuda = None
    if too_old:
        found = int(too_old.group("v"))
        driver_cuda = f"{found // 1000}.{(found % 1000) // 10}"
    nvml = _NVML_ERROR.search(clean)
    no_driver = _NO_DRIVER.search(clean)
    driver = Driver(
        version=driver_version,
        cuda_version=driver_cuda,
        nvml_error=nvml.group("msg").strip()
        if nvml
        else (no_driver.group(0) if no_driver else None),
        kernel_module_loaded=False if no_driver else (True if driver_version else None),
    )
    present.append("driver")

    gpus = _gpus(fields, blocks, clean)
    if gpus is not None:
        present.append("gpus")

    nvcc = _value(fields, "CUDA runtime version")
    toolkit = None
    if nvcc:
        toolkit = CudaToolkit(nvcc_version=nvcc.split()[0])
        present.append("cuda_toolkit")
    cudnn = blocks_of.cudnn_libraries(
        _value(fields, "cuDNN version"), blocks.get("cuDNN version", [])
    )
    if cudnn:
        present.append("cudnn_system_libraries")

    cpu = blocks_of.cpu_info(blocks.get("CPU", []))
    if cpu:
        present.append("cpu")

    packages = blocks_of.listed_packages(blocks.get("Versions of relevant libraries", []))
    installer = blocks_of.torch_installer(packages, torch_version)
    torch = _torch(fields, clean, torch_version, installer) if torch_version else None
    frameworks = Frameworks(
        python_version=os_info.python_version,
        torch=torch,
        torchvision=blocks_of.companion(packages, "torchvision", installer),
        torchaudio=blocks_of.companion(packages, "torchaudio", installer),
        duplicates=blocks_of.torch_duplicates(packages, torch_version),
        packages=tuple(
            (p.name, p.version)
            for p in packages
            if p.name not in blocks_of.TORCH_NAMES | {"torchvision", "torchaudio"}
        ),
    )
    present.append("frameworks")
    return Machine(
        origin=Origin(kind="collect-env", path=path, detail="python -m torch.utils.collect_env"),
        os=os_info,
        cpu=cpu,
        driver=driver,
        gpus=gpus,
        cuda_toolkit=toolkit,
        cudnn_system_libraries=cudnn,
        frameworks=frameworks,
        probe_issues=recorded_only_issues("collect_env", tuple(present)),
    )

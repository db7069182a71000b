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
    CpuInfo,
    CudaToolkit,
    Driver,
    DuplicateInstall,
    Frameworks,
    Gpu,
    LibraryFile,
    Machine,
    Origin,
    OsInfo,
    PackageInfo,
    TorchInfo,
)
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
_PIP_LINE = re.compile(r"^\[(?P<tool>pip3?|conda)\]\s+(?P<rest>.+)$")


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


def _strip_markdown(line: str) -> str:
    line = line.rstrip()
    if line.strip().startswith("```"):
        return ""
    return line


def parse_fields(text: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Single-line values by key, and the continuation lines that follow each key."""
    fields: dict[str, str] = {}
    blocks: dict[str, list[str]] = {}
    current: str | None = None
    for raw in _normalise(text).split("\n"):
        line = _strip_markdown(raw)
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
            name = match.group(2).strip()
            gpus.append(
                Gpu(index=int(match.group(1)), name=name, catalogue_id=catalogue_id_for(name))
            )
        elif not gpus and line.strip() and not line.strip().startswith("GPU"):
            # Single-GPU outputs of some releases print just the name.
            name = line.strip()
            if re.search(
                r"\b(NVIDIA|GeForce|Tesla|Quadro|RTX|GTX|A\d{2,3}|H\d{3}|L\d{1,2})\b", name
            ):
                gpus.append(Gpu(index=0, name=name, catalogue_id=catalogue_id_for(name)))
    if not gpus:
        return None
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


def _packages(blocks: dict[str, list[str]]) -> list[tuple[str, str, str, str | None]]:
    """(tool, name, version, build-or-channel) for each [pip3]/[conda] line."""
    found: list[tuple[str, str, str, str | None]] = []
    lines = list(blocks.get("Versions of relevant libraries", []))
    for line in lines:
        match = _PIP_LINE.match(line.strip())
        if not match:
            continue
        tool, rest = match.group("tool"), match.group("rest").strip()
        if tool.startswith("pip"):
            name, sep, version = rest.partition("==")
            if not sep:
                continue
            found.append(("pip", name.strip().lower(), version.strip(), None))
        else:
            parts = rest.split()
            if len(parts) >= 2:
                build = " ".join(parts[2:]) if len(parts) > 2 else None
                found.append(("conda", parts[0].lower(), parts[1], build))
    return found


_TORCH_NAMES = {"torch", "pytorch"}


def _torch_and_companions(
    packages: list[tuple[str, str, str, str | None]], torch_version: str | None
) -> tuple[PackageInfo | None, PackageInfo | None, tuple[DuplicateInstall, ...]]:
    def pick(name: str) -> PackageInfo | None:
        for tool, pkg, version, build in packages:
            if pkg == name:
                return PackageInfo(name=name, version=version, installer=tool, build=build)
        return None

    torch_installs: dict[str, set[str]] = {}
    for tool, pkg, version, build in packages:
        if pkg not in _TORCH_NAMES:
            continue
        # `conda list` also shows pip-installed packages with channel "pypi": same install.
        if tool == "conda" and build and "pypi" in build:
            tool = "pip"
        torch_installs.setdefault(version.split("+")[0], set()).add(tool)
    if torch_version:
        torch_installs.setdefault(torch_version.split("+")[0], set()).add("import")
    duplicates: tuple[DuplicateInstall, ...] = ()
    installed_versions = {v: tools for v, tools in torch_installs.items() if tools - {"import"}}
    if len(torch_installs) > 1 and len(installed_versions) >= 1:
        versions = tuple(sorted(torch_installs))
        locations = tuple(f"{'+'.join(sorted(torch_installs[v]))}: {v}" for v in versions)
        duplicates = (DuplicateInstall(name="torch", versions=versions, locations=locations),)
    return pick("torchvision"), pick("torchaudio"), duplicates


def _cpu(blocks: dict[str, list[str]]) -> CpuInfo | None:
    lines = blocks.get("CPU", [])
    if not lines:
        return None
    info: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip().lower()] = value.strip()

    def integer(key: str) -> int | None:
        match = re.match(r"(\d+)", info.get(key, ""))
        return int(match.group(1)) if match else None

    sockets = integer("socket(s)")
    cores_per_socket = integer("core(s) per socket")
    threads = integer("cpu(s)")
    l3 = None
    match = re.match(r"([\d.]+)\s*(KiB|MiB|GiB|K|M)", info.get("l3 cache", ""))
    if match:
        scale = {"kib": 1024, "k": 1024, "mib": 1024**2, "m": 1024**2, "gib": 1024**3}
        l3 = int(float(match.group(1)) * scale[match.group(2).lower()])
        instances = re.search(r"\((\d+) instances?\)", info.get("l3 cache", ""))
        if instances and int(instances.group(1)) > 0:
            l3 //= int(instances.group(1))
    return CpuInfo(
        model=info.get("model name") or info.get("name"),
        sockets=sockets,
        cores=sockets * cores_per_socket if sockets and cores_per_socket else None,
        threads=threads,
        l3_cache_bytes=l3,
        numa_nodes=integer("numa node(s)"),
    )


def _cudnn(fields: dict[str, str], blocks: dict[str, list[str]]) -> tuple[LibraryFile, ...] | None:
    first = _value(fields, "cuDNN version")
    lines = ([first] if first else []) + blocks.get("cuDNN version", [])
    libraries = []
    for line in lines:
        if line.lower().startswith("probably one of the following"):
            continue
        path_match = re.search(r"(/\S*libcudnn\S*?\.so(?:\.(\d+(?:\.\d+)*))?)", line)
        if path_match:
            libraries.append(LibraryFile(path=path_match.group(1), version=path_match.group(2)))
        elif re.fullmatch(r"\d+(\.\d+)*", line.strip()):
            libraries.append(LibraryFile(path="(reported by collect_env)", version=line.strip()))
    return tuple(libraries) if libraries else None


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
    cudnn = _cudnn(fields, blocks)
    if cudnn:
        present.append("cudnn_system_libraries")

    cpu = _cpu(blocks)
    if cpu:
        present.append("cpu")

    packages = _packages(blocks)
    torch = None
    if torch_version:
        build_cuda = _value(fields, "CUDA used to build PyTorch")
        hip = _value(fields, "ROCM used to build PyTorch") or _value(fields, "HIP runtime version")
        arch_warning = _ARCH_WARNING.search(clean)
        # collect_env prints torch.version.cuda; None ("None"/"Could not collect" while torch
        # imported) means a build without CUDA.
        build = "cuda" if build_cuda else ("rocm" if hip else "cpu")
        if build == "cpu" and (
            torch_version.endswith("+xpu") or _bool(fields, "Is XPU available") is True
        ):
            build = "xpu"  # Intel GPU builds have no CUDA either, but are not CPU-only
        torch = TorchInfo(
            version=torch_version,
            build=build,
            cuda_version=build_cuda,
            hip_version=hip,
            arch_list=tuple(arch_warning.group("archs").split()) if arch_warning else None,
            cuda_available=_bool(fields, "Is CUDA available"),
            installer="pip" if any(p[1] == "torch" and p[0] == "pip" for p in packages) else None,
        )
    torchvision, torchaudio, duplicates = _torch_and_companions(packages, torch_version)
    others = tuple(
        (name, version)
        for tool, name, version, _ in packages
        if name not in _TORCH_NAMES | {"torchvision", "torchaudio"}
    )
    frameworks = Frameworks(
        python_version=os_info.python_version,
        torch=torch,
        torchvision=torchvision,
        torchaudio=torchaudio,
        duplicates=duplicates,
        packages=others,
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

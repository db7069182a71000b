"""The multi-line blocks of a collect_env paste: the libraries (which torch, which companions),
the CPU and cuDNN.

collect_env prints `pip list --format=freeze` lines as `[pip3] name==version` (older releases ran
`pip`/`pip3` from PATH, so these may belong to another interpreter than the one that imported
torch; since 2.x it runs `sys.executable -mpip`) and `conda list` lines as
`[conda] name  version  build  channel`, where a pip-installed package shows channel `pypi`.
2018 releases printed pip's legacy `name (version)` form. `PyTorch version` is what `import
torch` returned, so a package list naming another torch release means two installs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dlrig.machine.model import CpuInfo, DuplicateInstall, LibraryFile, PackageInfo

_LIST_LINE = re.compile(r"^\[(?P<tool>pip3?|conda)\]\s+(?P<rest>.+)$")
_LEGACY_PIP = re.compile(r"^(?P<name>[A-Za-z0-9_.\-]+)\s+\((?P<version>[^)\s]+)\)$")
TORCH_NAMES = {"torch", "pytorch"}


@dataclass(frozen=True)
class Listed:
    tool: str  # pip | conda ("conda" lines with channel pypi are pip installs seen by conda)
    name: str
    version: str
    build: str | None  # conda's build string and channel, verbatim


def listed_packages(lines: list[str]) -> list[Listed]:
    found: list[Listed] = []
    for line in lines:
        match = _LIST_LINE.match(line.strip())
        if not match:
            continue
        tool, rest = match.group("tool"), match.group("rest").strip()
        if tool.startswith("pip"):
            name, sep, version = rest.partition("==")
            if not sep:
                legacy = _LEGACY_PIP.match(rest)
                if not legacy:
                    continue
                name, version = legacy.group("name"), legacy.group("version")
            found.append(Listed("pip", name.strip().lower(), version.strip(), None))
            continue
        parts = rest.split()
        if len(parts) >= 2:
            build = " ".join(parts[2:]) if len(parts) > 2 else None
            # conda lists pip installs with channel 'pypi' (older conda: '<pip>').
            pip_seen_by_conda = bool({"pypi", "<pip>"} & set((build or "").split()))
            found.append(
                Listed("pip" if pip_seen_by_conda else "conda", parts[0].lower(), parts[1], build)
            )
    return found


def _base(version: str) -> str:
    return version.split("+")[0]


_WHEEL_VARIANT = re.compile(r"^(cu\d+|cpu|rocm[\d.]+|xpu)$")


def _variant(version: str) -> str | None:
    local = version.partition("+")[2]
    return local if _WHEEL_VARIANT.match(local) else None


def same_release(a: str, b: str) -> bool:
    """'2.5.1+cu121' vs '2.5.1': same; '2.5.1+cu121' vs '2.5.1+cpu': different builds. Other
    local parts (a source build's git hash, '+cxx11.abi') are not compared: setup.py writes
    version.py and the package metadata at different times."""
    if _base(a) != _base(b):
        return False
    variant_a, variant_b = _variant(a), _variant(b)
    return not (variant_a and variant_b and variant_a != variant_b)


def torch_installer(packages: list[Listed], imported: str | None) -> str | None:
    """Which package list holds the torch that `import torch` found."""
    torches = [p for p in packages if p.name in TORCH_NAMES]
    if imported:
        for tool in ("pip", "conda"):
            if any(p.tool == tool and same_release(p.version, imported) for p in torches):
                return tool
        return None  # no listed torch is the one imported: another install is
    return torches[0].tool if torches else None


def companion(packages: list[Listed], name: str, installer: str | None) -> PackageInfo | None:
    """torchvision/torchaudio from the same installer as the imported torch, else any listed."""
    candidates = [p for p in packages if p.name == name]
    candidates.sort(key=lambda p: p.tool != installer)
    if not candidates:
        return None
    chosen = candidates[0]
    return PackageInfo(name=name, version=chosen.version, installer=chosen.tool, build=chosen.build)


def torch_duplicates(packages: list[Listed], imported: str | None) -> tuple[DuplicateInstall, ...]:
    """Distinct torch builds among the imported one and every listed one."""
    builds: list[tuple[str, set[str]]] = []

    def add(version: str, where: str) -> None:
        for known, places in builds:
            if same_release(known, version):
                places.add(where)
                return
        builds.append((version, {where}))

    for package in packages:
        if package.name in TORCH_NAMES:
            add(package.version, package.tool)
    if imported:
        add(imported, "import")
    installed = [b for b in builds if b[1] - {"import"}]
    if len(builds) < 2 or not installed:
        return ()
    builds.sort(key=lambda b: b[0])
    return (
        DuplicateInstall(
            name="torch",
            versions=tuple(version for version, _ in builds),
            locations=tuple(f"{'+'.join(sorted(places))}: {version}" for version, places in builds),
        ),
    )


def cpu_info(lines: list[str]) -> CpuInfo | None:
    """The CPU block: lscpu's 'Key: value' lines (Linux) or WMI's (Windows)."""
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


def cudnn_libraries(first: str | None, block: list[str]) -> tuple[LibraryFile, ...] | None:
    """cuDNN's files as collect_env lists them ('Probably one of the following:' and paths)."""
    lines = ([first] if first else []) + block
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

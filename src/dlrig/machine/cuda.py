"""CUDA toolkit (nvcc), system cuDNN and NCCL libraries, NCCL configuration."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from dlrig.machine.model import CudaToolkit, LibraryFile, Nccl
from dlrig.machine.runner import ProbeContext

_NVCC_RELEASE = re.compile(r"release [\d.]+, V(?P<version>[\d.]+)")


def _nvcc_path(ctx: ProbeContext) -> tuple[str | None, str | None]:
    cuda_home = ctx.env.get("CUDA_HOME") or ctx.env.get("CUDA_PATH")
    candidates = []
    if cuda_home:
        candidates.append(str(Path(cuda_home) / "bin" / "nvcc"))
    on_path = ctx.runner.which("nvcc")
    if on_path:
        candidates.append(on_path)
    candidates.append("/usr/local/cuda/bin/nvcc")
    for candidate in candidates:
        if ctx.path(candidate).is_file():
            home = str(Path(candidate).resolve().parent.parent) if ctx.root == Path("/") else None
            return candidate, cuda_home or home
    return None, cuda_home


def toolkit(ctx: ProbeContext) -> CudaToolkit:
    nvcc, home = _nvcc_path(ctx)
    if nvcc is None:
        return CudaToolkit(cuda_home=home)
    version = None
    if home:
        # version.json sits beside bin/ since CUDA 11.1: reading it is faster than running nvcc.
        manifest = ctx.read(str(Path(home) / "version.json"))
        if manifest:
            try:
                version = json.loads(manifest)["cuda_nvcc"]["version"]
            except (ValueError, KeyError, TypeError):
                version = None
    if version is None:
        result = ctx.runner.run([nvcc, "--version"], ctx.timeout_s)
        match = _NVCC_RELEASE.search(result.stdout) if result.ok else None
        version = match.group("version") if match else None
    return CudaToolkit(nvcc_path=nvcc, nvcc_version=version, cuda_home=home)


def _version_from_name(path: str, stem: str) -> str | None:
    name = os.path.basename(path)
    match = re.match(rf"{re.escape(stem)}\.so\.(\d+(?:\.\d+)*)$", name)
    return match.group(1) if match else None


def system_libraries(ctx: ProbeContext, stem: str) -> tuple[LibraryFile, ...]:
    """Copies of a library the dynamic loader knows (`ldconfig -p`), with their versions."""
    result = ctx.runner.run(["ldconfig", "-p"], ctx.timeout_s)
    if not result.ok:
        result = ctx.runner.run(["/sbin/ldconfig", "-p"], ctx.timeout_s)
    found: dict[str, LibraryFile] = {}
    for line in result.stdout.splitlines() if result.ok else ():
        match = re.search(rf"({re.escape(stem)}\.so[.\d]*)\s.*=>\s*(\S+)", line)
        if not match:
            continue
        path = match.group(2)
        real = os.path.realpath(path) if ctx.root == Path("/") else path
        version = _version_from_name(real, stem) or _version_from_name(path, stem)
        found[real] = LibraryFile(path=real, version=version)
    return tuple(found[key] for key in sorted(found))


def _conf_settings(text: str) -> list[tuple[str, str]]:
    settings = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            key, value = line.split("=", 1)
            settings.append((key.strip(), value.strip()))
    return settings


def nccl(ctx: ProbeContext) -> Nccl:
    files = []
    settings: list[tuple[str, str]] = []
    candidates = ["/etc/nccl.conf"]
    if ctx.env.get("NCCL_CONF_FILE"):
        candidates.append(ctx.env["NCCL_CONF_FILE"])
    home = ctx.env.get("HOME")
    if home:
        candidates.append(str(Path(home) / ".nccl.conf"))
    for candidate in candidates:
        text = ctx.read(candidate)
        if text is None:
            continue
        files.append(candidate)
        settings.extend(_conf_settings(text))
    env = tuple(sorted((k, v) for k, v in ctx.env.items() if k.startswith("NCCL_")))
    return Nccl(
        system_libraries=system_libraries(ctx, "libnccl"),
        conf_files=tuple(files),
        conf=tuple(settings),
        env=env,
    )

"""Describe the deep-learning frameworks of a Python environment WITHOUT importing them.

This file is run as a script under the interpreter being inspected (`dlrig doctor --python`),
so it uses the standard library only and prints one JSON document. Importing torch takes
seconds, can initialise CUDA and can crash on a broken install, so everything here is read
from files: `torch/version.py`, package metadata, library file names, and the architecture list
torch compiles into `libtorch_python.so` (the same string `torch.cuda.get_arch_list()` returns).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata as metadata
import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

# The exact C string torch embeds for torch.cuda.get_arch_list(): "sm_75 sm_80 ... compute_90".
_ARCH_STRING = re.compile(rb"\x00((?:sm|compute)_\d+[af]?(?: (?:sm|compute)_\d+[af]?)*)\x00")
_INTERESTING = {
    "torch",
    "torchvision",
    "torchaudio",
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tf-nightly",
    "jax",
    "jaxlib",
    "numpy",
    "triton",
    "deepspeed",
    "accelerate",
    "transformers",
    "lightning",
    "pytorch-lightning",
    "xformers",
    "flash-attn",
    "bitsandbytes",
    "apex",
}


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _assignments(path: Path) -> dict[str, Any]:
    """Module-level `name = literal` assignments of a Python file, without running it."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, SyntaxError):
        return {}
    found: dict[str, Any] = {}
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = list(node.targets), node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        for target in targets:
            if isinstance(target, ast.Name) and value is not None:
                with contextlib.suppress(ValueError, SyntaxError, TypeError):
                    found[target.id] = ast.literal_eval(value)
    return found


def _package_dir(module: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _installer(dist: metadata.Distribution) -> str:
    try:
        text = dist.read_text("INSTALLER")
    except OSError:
        text = None
    if text:
        return text.strip() or "unknown"
    return "unknown"


def _distributions() -> list[dict[str, Any]]:
    found = []
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if not name:
            continue
        location = None
        with contextlib.suppress(OSError, TypeError, ValueError):
            location = str(Path(str(dist.locate_file(""))).resolve())
        found.append(
            {
                "name": _normalise(name),
                "version": dist.version,
                "location": location,
                "installer": _installer(dist),
            }
        )
    return found


def _lib_version(lib_dir: Path, stem: str) -> str | None:
    """ "libcudnn.so.9.1.0" in a lib folder -> "9.1.0"."""
    if not lib_dir.is_dir():
        return None
    best = None
    for entry in lib_dir.glob(f"{stem}.so.*"):
        version = entry.name.split(".so.", 1)[1]
        if re.fullmatch(r"\d+(\.\d+)*", version) and (best is None or len(version) > len(best)):
            best = version
    return best


def _arch_list(torch_dir: Path) -> list[str] | None:
    for library in ("libtorch_python.so", "libtorch_cuda.so"):
        path = torch_dir / "lib" / library
        if not path.is_file():
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        matches = [m.group(1).decode() for m in _ARCH_STRING.finditer(data)]
        if matches:
            return max(matches, key=len).split()
    return None


def _torch(dists: list[dict[str, Any]]) -> dict[str, Any] | None:
    torch_dir = _package_dir("torch")
    if torch_dir is None:
        return None
    info: dict[str, Any] = {"location": str(torch_dir)}
    version = _assignments(torch_dir / "version.py")
    info["version"] = version.get("__version__")
    info["cuda"] = version.get("cuda")
    info["hip"] = version.get("hip")
    if info["version"] is None:
        for dist in dists:
            if dist["name"] == "torch":
                info["version"] = dist["version"]
    if info["cuda"]:
        info["arch_list"] = _arch_list(torch_dir)
        bundled = torch_dir / "lib"
        info["cudnn"] = _lib_version(bundled, "libcudnn")
        info["nccl"] = _lib_version(bundled, "libnccl")
        # Since 1.13 the CUDA wheels take cuDNN and NCCL from nvidia-* pip packages.
        for dist in dists:
            if info["cudnn"] is None and dist["name"].startswith("nvidia-cudnn-cu"):
                info["cudnn"] = dist["version"]
            if info["nccl"] is None and dist["name"].startswith("nvidia-nccl-cu"):
                info["nccl"] = dist["version"]
    return info


def _companion(module: str) -> dict[str, Any] | None:
    directory = _package_dir(module)
    if directory is None:
        return None
    version = _assignments(directory / "version.py")
    return {
        "location": str(directory),
        "version": version.get("__version__"),
        "cuda": version.get("cuda"),
    }


def _tensorflow() -> dict[str, Any] | None:
    directory = _package_dir("tensorflow")
    if directory is None:
        return None
    info: dict[str, Any] = {"location": str(directory)}
    build_file = directory / "python" / "platform" / "build_info.py"
    if build_file.is_file():
        text = build_file.read_text(encoding="utf-8", errors="replace")
        for key in ("cuda_version", "cudnn_version", "is_cuda_build", "is_rocm_build"):
            match = re.search(rf"['\"]{key}['\"]\s*[:,]\s*['\"]?([\w.]+)", text)
            if match:
                info[key] = match.group(1)
    return info


def main() -> None:
    dists = _distributions()
    document = {
        "python_executable": sys.executable,
        "python_version": ".".join(str(part) for part in sys.version_info[:3]),
        "prefix": sys.prefix,
        "conda": os.path.isdir(os.path.join(sys.prefix, "conda-meta")),
        "distributions": [
            d for d in dists if d["name"] in _INTERESTING or d["name"].startswith("nvidia-")
        ],
        "all_names": sorted({d["name"] for d in dists}),
        "torch": _torch(dists),
        "torchvision": _companion("torchvision"),
        "torchaudio": _companion("torchaudio"),
        "tensorflow": _tensorflow(),
    }
    json.dump(document, sys.stdout)


if __name__ == "__main__":
    main()

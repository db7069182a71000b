"""Frameworks of a Python environment, described by `frameworks_probe.py` run under it."""

from __future__ import annotations

import json
import sys
from importlib import resources
from typing import Any

from dlrig.machine.model import DuplicateInstall, Frameworks, PackageInfo, TorchInfo
from dlrig.machine.runner import ProbeContext

_TENSORFLOW_DISTS = ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly")


def _script() -> str:
    return (
        resources.files("dlrig.machine").joinpath("frameworks_probe.py").read_text(encoding="utf-8")
    )


def run_probe(ctx: ProbeContext) -> dict[str, Any]:
    """The probe's JSON document; RuntimeError with the reason when it cannot run."""
    python = ctx.python or sys.executable
    result = ctx.runner.run([python, "-c", _script()], ctx.timeout_s, env=dict(ctx.env))
    if result.error:
        raise RuntimeError(f"{python}: {result.error}")
    if result.returncode != 0:
        tail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{python} exited with {result.returncode}: {tail}")
    try:
        document: dict[str, Any] = json.loads(result.stdout)
    except ValueError:
        raise RuntimeError(f"{python}: the framework probe printed no JSON") from None
    return document


def _dist(document: dict[str, Any], name: str) -> dict[str, Any] | None:
    for dist in document.get("distributions", []):
        if dist["name"] == name:
            return dict(dist)
    return None


def _duplicates(document: dict[str, Any]) -> tuple[DuplicateInstall, ...]:
    by_name: dict[str, dict[str, str]] = {}
    for dist in document.get("distributions", []):
        location = dist.get("location") or "?"
        by_name.setdefault(dist["name"], {})[location] = dist["version"]
    found = []
    for name, installs in sorted(by_name.items()):
        if len(installs) > 1:
            found.append(
                DuplicateInstall(
                    name=name,
                    versions=tuple(installs[location] for location in sorted(installs)),
                    locations=tuple(sorted(installs)),
                )
            )
    return tuple(found)


def frameworks_from_probe(document: dict[str, Any]) -> Frameworks:
    torch = None
    raw_torch = document.get("torch")
    if raw_torch and raw_torch.get("version"):
        dist = _dist(document, "torch") or {}
        arch = raw_torch.get("arch_list")
        torch = TorchInfo(
            version=raw_torch["version"],
            build="cuda" if raw_torch.get("cuda") else ("rocm" if raw_torch.get("hip") else "cpu"),
            cuda_version=raw_torch.get("cuda"),
            hip_version=raw_torch.get("hip"),
            cudnn_version=raw_torch.get("cudnn"),
            nccl_version=raw_torch.get("nccl"),
            arch_list=tuple(arch)
            if arch is not None
            else (() if not raw_torch.get("cuda") else None),
            cuda_available=None,
            location=raw_torch.get("location"),
            installer=dist.get("installer"),
        )

    def companion(module: str) -> PackageInfo | None:
        raw = document.get(module)
        dist = _dist(document, module)
        version = (raw or {}).get("version") or (dist or {}).get("version")
        if not version:
            return None
        return PackageInfo(
            name=module,
            version=version,
            location=(raw or {}).get("location"),
            installer=(dist or {}).get("installer"),
            build=f"cuda-{raw['cuda']}" if raw and raw.get("cuda") else None,
        )

    tensorflow = None
    for name in _TENSORFLOW_DISTS:
        tf_dist = _dist(document, name)
        if tf_dist:
            raw_tf: dict[str, Any] = document.get("tensorflow") or {}
            build = None
            if str(raw_tf.get("is_cuda_build", "")).lower() == "true":
                build = f"cuda-{raw_tf.get('cuda_version', '?')}"
            elif raw_tf:
                build = "cpu"
            tensorflow = PackageInfo(
                name=name, version=tf_dist["version"], location=raw_tf.get("location"), build=build
            )
            break

    def plain(name: str) -> PackageInfo | None:
        dist = _dist(document, name)
        if not dist:
            return None
        return PackageInfo(name=name, version=dist["version"], location=dist.get("location"))

    plugin = None
    for dist in document.get("distributions", []):
        if dist["name"].startswith(("jax-cuda", "jax-rocm")) and "plugin" in dist["name"]:
            plugin = PackageInfo(
                name=dist["name"], version=dist["version"], location=dist.get("location")
            )
    skip = {"torch", "torchvision", "torchaudio", "jax", "jaxlib", *_TENSORFLOW_DISTS}
    others = tuple(
        sorted(
            {
                (d["name"], d["version"])
                for d in document.get("distributions", [])
                if d["name"] not in skip
            }
        )
    )
    return Frameworks(
        python_executable=document.get("python_executable"),
        python_version=document.get("python_version"),
        torch=torch,
        torchvision=companion("torchvision"),
        torchaudio=companion("torchaudio"),
        tensorflow=tensorflow,
        jax=plain("jax"),
        jaxlib=plain("jaxlib"),
        jax_cuda_plugin=plugin,
        duplicates=_duplicates(document),
        packages=others,
    )


def frameworks(ctx: ProbeContext) -> Frameworks:
    return frameworks_from_probe(run_probe(ctx))

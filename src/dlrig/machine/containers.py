"""Container facts: are we inside one, is Docker here, can Docker hand out GPUs."""

from __future__ import annotations

import json

from dlrig.machine.model import Containers
from dlrig.machine.runner import ProbeContext

_TOOLKIT_BINARIES = (
    "nvidia-ctk",
    "nvidia-container-cli",
    "nvidia-container-runtime",
    "nvidia-container-runtime-hook",
    "nvidia-container-toolkit",
)


def _container_kind(ctx: ProbeContext) -> str | None:
    if ctx.env.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if ctx.path("/.dockerenv").exists():
        return "docker"
    if ctx.path("/run/.containerenv").exists():
        return "podman"
    cgroup = ctx.read("/proc/1/cgroup") or ""
    for marker, kind in (
        ("kubepods", "kubernetes"),
        ("docker", "docker"),
        ("lxc", "lxc"),
        ("containerd", "other"),
    ):
        if marker in cgroup:
            return kind
    return None


def containers(ctx: ProbeContext) -> Containers:
    kind = _container_kind(ctx)
    docker = ctx.runner.which("docker")
    toolkit = any(ctx.runner.which(binary) for binary in _TOOLKIT_BINARIES)
    runtime_configured = None
    daemon = ctx.read("/etc/docker/daemon.json")
    if daemon is not None:
        try:
            runtimes = json.loads(daemon).get("runtimes", {})
            runtime_configured = "nvidia" in runtimes
        except (ValueError, AttributeError):
            runtime_configured = None
    return Containers(
        in_container=kind is not None,
        container_kind=kind,
        docker_installed=docker is not None,
        docker_is_snap=docker.startswith("/snap/") if docker else None,
        nvidia_container_toolkit=toolkit,
        docker_nvidia_runtime_configured=runtime_configured,
    )

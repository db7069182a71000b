"""Which container or Kubernetes pod a process belongs to, from /proc/<pid>/cgroup.

GPU memory is attributed to process ids by NVML; on a shared server the question is whose
container they are. The cgroup path names the container runtime's id in every layout in use:

    cgroup v1, docker:        4:memory:/docker/<64 hex>   or  /<64 hex> (Debian)
    systemd driver:           0::/system.slice/docker-<64 hex>.scope (also crio-, libpod-,
                              cri-containerd-)
    Kubernetes, cgroupfs:     /kubepods/besteffort/pod<uid>/<64 hex>
    Kubernetes, systemd:      /kubepods.slice/.../kubepods-burstable-pod<uid_with_underscores>.slice/
                              cri-containerd-<64 hex>.scope
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_CONTAINER_ID = re.compile(r"(?<![0-9a-f])([0-9a-f]{64})(?![0-9a-f])")
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)


def container_of_cgroup(text: str) -> tuple[str | None, str | None]:
    """(container id, Kubernetes pod uid) named by a /proc/<pid>/cgroup text, else None."""
    container: str | None = None
    pod: str | None = None
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        ids = _CONTAINER_ID.findall(path)
        if ids and container is None:
            container = ids[-1]  # the innermost id: a pod's pause container comes first
        match = _POD_UID.search(path)
        if match and pod is None:
            pod = match.group(1).replace("_", "-")
    return container, pod


def holds_nvidia_device(pid: int, proc: Path = Path("/proc")) -> bool | None:
    """Whether process `pid` here has /dev/nvidia* open; None when we may not look.

    NVML reports host PIDs. Run inside a container with its own PID namespace, dlrig sees other
    processes under those numbers (or none), so a PID is only attributed when the process it
    names here really holds a GPU device.
    """
    try:
        fds = list((proc / str(pid) / "fd").iterdir())
    except PermissionError:
        return None
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(fd).startswith("/dev/nvidia"):
                return True
        except OSError:
            continue
    return False


def container_of_pid(pid: int, proc: Path = Path("/proc")) -> tuple[str | None, str | None]:
    """The container of a live process; (None, None) when it runs on the host or is gone."""
    try:
        text = (proc / str(pid) / "cgroup").read_text()
    except OSError:
        return None, None
    return container_of_cgroup(text)

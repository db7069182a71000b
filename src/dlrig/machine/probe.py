"""Collect a live Machine: every source runs concurrently, each bounded by a timeout.

A source that fails or times out leaves its section None and a `ProbeIssue` saying why; the
snapshot is still produced. Nothing here initialises CUDA.
"""

from __future__ import annotations

import datetime as dt
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from dlrig.machine import containers, cuda, frameworks, host, network, nvidia, storage
from dlrig.machine.model import KernelLog, Machine, Origin, ProbeIssue
from dlrig.machine.readers.kernel_log import xid_events
from dlrig.machine.runner import ProbeContext


@dataclass(frozen=True)
class SourceTiming:
    name: str
    seconds: float
    ok: bool


def _kernel_log(ctx: ProbeContext) -> tuple[KernelLog | None, str | None]:
    if not ctx.read_kernel_log:
        return None, "kernel log reading was turned off"
    result = ctx.runner.run(["dmesg", "--ctime"], ctx.timeout_s)
    if not result.ok:
        result = ctx.runner.run(["dmesg"], ctx.timeout_s)
    if not result.ok:
        reason = result.error or (result.stderr.strip().splitlines() or ["failed"])[-1]
        return (
            None,
            f"dmesg: {reason} (run as root or set kernel.dmesg_restrict=0 to read Xid errors)",
        )
    return KernelLog(xid_events=xid_events(result.stdout.splitlines()), source="dmesg"), None


def collect(
    ctx: ProbeContext | None = None,
    progress: Callable[[str], None] | None = None,
) -> Machine:
    """Probe the machine described by `ctx` (the live one by default)."""
    ctx = ctx or ProbeContext()
    sources: dict[str, Callable[[], Any]] = {
        "os": lambda: host.os_info(ctx),
        "cpu": lambda: host.cpu_info(ctx),
        "memory": lambda: host.memory_info(ctx),
        "shm": lambda: host.shared_memory(ctx),
        "limits": host.limits,
        "mounts": lambda: storage.mounts(ctx),
        "network": lambda: network.interfaces(ctx),
        "firewall": lambda: network.firewall(ctx),
        "containers": lambda: containers.containers(ctx),
        "nvidia": lambda: nvidia.probe(ctx),
        "cuda_toolkit": lambda: cuda.toolkit(ctx),
        "cudnn_system_libraries": lambda: cuda.system_libraries(ctx, "libcudnn"),
        "nccl": lambda: cuda.nccl(ctx),
        "frameworks": lambda: frameworks.frameworks(ctx),
        "kernel_log": lambda: _kernel_log(ctx),
    }
    results: dict[str, Any] = {}
    issues: list[ProbeIssue] = []
    started = time.monotonic()
    # Threads, not processes: the sources mostly wait on files and subprocesses.
    pool = ThreadPoolExecutor(max_workers=len(sources), thread_name_prefix="dlrig-probe")
    try:
        futures = {pool.submit(fn): name for name, fn in sources.items()}
        # One shared deadline: a source stuck past it is reported, not waited for.
        deadline_s = ctx.timeout_s + 5
        done, not_done = wait(futures, timeout=deadline_s)
        for future in done:
            name = futures[future]
            try:
                results[name] = future.result()
            except Exception as exc:  # noqa: BLE001 - a probe failure is a finding, not a crash
                issues.append(ProbeIssue(name, f"{type(exc).__name__}: {exc}"))
            if progress:
                progress(name)
        for future in not_done:
            issues.append(ProbeIssue(futures[future], f"did not finish within {deadline_s:g} s"))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    driver = gpus = topology = None
    if "nvidia" in results:
        driver, gpus, topology, nvidia_issues = results.pop("nvidia")
        issues.extend(nvidia_issues)
    firewall = None
    if "firewall" in results:
        firewall, reason = results.pop("firewall")
        if reason:
            issues.append(ProbeIssue("firewall", reason))
    kernel_log = None
    if "kernel_log" in results:
        kernel_log, reason = results.pop("kernel_log")
        if reason:
            issues.append(ProbeIssue("kernel_log", reason))
    return Machine(
        origin=Origin(
            kind="live",
            collected_at=dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
            hostname=socket.gethostname(),
            detail=f"probed in {time.monotonic() - started:.2f} s",
        ),
        os=results.get("os"),
        cpu=results.get("cpu"),
        memory=results.get("memory"),
        shm=results.get("shm"),
        mounts=results.get("mounts"),
        network=results.get("network"),
        firewall=firewall,
        containers=results.get("containers"),
        driver=driver,
        gpus=gpus,
        topology=topology,
        cuda_toolkit=results.get("cuda_toolkit"),
        cudnn_system_libraries=results.get("cudnn_system_libraries"),
        nccl=results.get("nccl"),
        frameworks=results.get("frameworks"),
        kernel_log=kernel_log,
        limits=results.get("limits"),
        env=host.relevant_env(dict(ctx.env)),
        probe_issues=tuple(sorted(issues, key=lambda i: i.source)),
    )

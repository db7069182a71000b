"""Collect a live Machine: every source runs concurrently, each bounded by a timeout.

A source that fails or times out leaves its section None and a `ProbeIssue` saying why; the
snapshot is still produced. Nothing here initialises CUDA.
"""

from __future__ import annotations

import datetime as dt
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from dlrig.machine import amd, containers, cuda, frameworks, host, network, nvidia, storage
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


def _run_bounded(
    sources: dict[str, Callable[[], Any]], deadline_s: float
) -> Iterator[tuple[str, Any]]:
    """Run every source in its own daemon thread; yield (name, result or exception) as each
    finishes, until all have or the deadline passes.

    Daemon threads, not a ThreadPoolExecutor: the executor's workers are joined when the
    interpreter exits, so one NVML call or NFS `statvfs` that never returns would keep
    `dlrig doctor` alive long after it printed its report. A daemon thread is left behind.
    """
    finished: queue.Queue[tuple[str, Any]] = queue.Queue()

    def work(name: str, function: Callable[[], Any]) -> None:
        try:
            outcome: Any = function()
        except Exception as exc:  # noqa: BLE001 - a probe failure is a finding, not a crash
            outcome = exc
        finished.put((name, outcome))

    for name, function in sources.items():
        threading.Thread(
            target=work, args=(name, function), name=f"dlrig-probe-{name}", daemon=True
        ).start()
    end = time.monotonic() + deadline_s
    for _ in sources:
        remaining = end - time.monotonic()
        if remaining <= 0:
            return
        try:
            yield finished.get(timeout=remaining)
        except queue.Empty:
            return


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
        "amd": lambda: amd.probe(ctx),
        "cuda_toolkit": lambda: cuda.toolkit(ctx),
        "cudnn_system_libraries": lambda: cuda.system_libraries(ctx, "libcudnn"),
        "nccl": lambda: cuda.nccl(ctx),
        "frameworks": lambda: frameworks.frameworks(ctx),
        "kernel_log": lambda: _kernel_log(ctx),
    }
    results: dict[str, Any] = {}
    issues: list[ProbeIssue] = []
    started = time.monotonic()
    # One shared deadline: a source stuck past it is reported, not waited for.
    deadline_s = ctx.timeout_s + 5
    for name, outcome in _run_bounded(sources, deadline_s):
        if isinstance(outcome, BaseException):
            issues.append(ProbeIssue(name, f"{type(outcome).__name__}: {outcome}"))
        else:
            results[name] = outcome
        if progress:
            progress(name)
    for name in sources:
        if name not in results and not any(issue.source == name for issue in issues):
            issues.append(ProbeIssue(name, f"did not finish within {deadline_s:g} s"))
    driver = gpus = topology = None
    if "nvidia" in results:
        driver, gpus, topology, nvidia_issues = results.pop("nvidia")
        issues.extend(nvidia_issues)
    rocm = None
    if "amd" in results:
        amd_gpus, amd_topology, rocm, amd_issues = results.pop("amd")
        issues.extend(amd_issues)
        # A machine with both vendors keeps NVML's indices for its NVIDIA GPUs; the AMD ones
        # are then only in the ROCm section's tool output, which is rare enough to leave.
        if amd_gpus and not gpus:
            gpus, topology = amd_gpus, topology or amd_topology
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
        firewall=firewall,
        driver=driver,
        gpus=gpus,
        topology=topology,
        rocm=rocm,
        kernel_log=kernel_log,
        env=host.relevant_env(dict(ctx.env)),
        probe_issues=tuple(sorted(issues, key=lambda i: i.source)),
        # What is left are the sections a source returns as they are (a failed one stays None).
        **results,
    )


def kernel_log(ctx: ProbeContext | None = None) -> tuple[KernelLog | None, str | None]:
    """The kernel log's Xid events alone (and why not, when it cannot be read): a second look
    after a long run, without probing everything again."""
    return _kernel_log(ctx or ProbeContext())


def collect_health(ctx: ProbeContext | None = None, deadline_s: float = 10.0) -> Machine:
    """What a node health check reads, and nothing more: the driver and GPUs through NVML (no
    CUDA context, no GPU allocated) and the kernel log's Xid events of this boot. Each source
    runs in its own thread under one deadline: a hung NVML call or a hung filesystem is reported
    as an issue, never waited for."""
    ctx = ctx or ProbeContext()
    sources: dict[str, Callable[[], Any]] = {
        "nvidia": lambda: nvidia.probe(ctx),
        "kernel_log": lambda: _kernel_log(ctx),
        "boot_id": lambda: (ctx.read("/proc/sys/kernel/random/boot_id") or "").strip() or None,
    }
    results: dict[str, Any] = {}
    issues: list[ProbeIssue] = []
    started = time.monotonic()
    for name, outcome in _run_bounded(sources, deadline_s):
        if isinstance(outcome, BaseException):
            issues.append(ProbeIssue(name, f"{type(outcome).__name__}: {outcome}"))
        else:
            results[name] = outcome
    for name in sources:
        if name not in results and not any(issue.source == name for issue in issues):
            issues.append(ProbeIssue(name, f"did not finish within {deadline_s:g} s"))
    driver = gpus = topology = kernel_log = None
    if "nvidia" in results:
        driver, gpus, topology, nvidia_issues = results["nvidia"]
        issues.extend(nvidia_issues)
    if "kernel_log" in results:
        kernel_log, reason = results["kernel_log"]
        if reason:
            issues.append(ProbeIssue("kernel_log", reason))
    return Machine(
        origin=Origin(
            kind="live",
            collected_at=dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
            hostname=socket.gethostname(),
            detail=f"health probe in {time.monotonic() - started:.2f} s",
            boot_id=results.get("boot_id"),
        ),
        driver=driver,
        gpus=gpus,
        topology=topology,
        kernel_log=kernel_log,
        probe_issues=tuple(sorted(issues, key=lambda i: i.source)),
    )

"""Host checks: RAM and CPU per GPU, /dev/shm, open-file limit, CPU power settings, host ECC."""

from __future__ import annotations

from dlrig.doctor import facts
from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.machine.model import Machine
from dlrig.report import CheckResult
from dlrig.units import human_bytes


@check("host.ram_vs_gpu", "host RAM is large enough for the GPUs")
def ram_vs_gpu(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Loading checkpoints, pinned-memory staging, DataLoader workers and CPU offload (ZeRO,
    FSDP) all live in host RAM. A common sizing rule is at least 1.5–2× the total GPU memory;
    the ratio is configurable (`--ram-ratio`)."""
    if m.memory is None or m.memory.total_bytes is None:
        return c.skip("host memory not in this snapshot")
    gpu_total = facts.total_gpu_memory_bytes(m)
    if not gpu_total:
        return c.skip("no GPU memory to compare with")
    ratio = m.memory.total_bytes / gpu_total
    evidence = (
        f"RAM {human_bytes(m.memory.total_bytes)}, GPU memory {human_bytes(gpu_total)} "
        f"(ratio {ratio:.2f}, wanted ≥ {o.ram_to_gpu_memory_ratio:g})"
    )
    if ratio < o.ram_to_gpu_memory_ratio:
        return c.warn(
            f"host RAM is only {ratio:.2f}× the total GPU memory",
            evidence,
            fix=f"Add RAM to at least {human_bytes(gpu_total * o.ram_to_gpu_memory_ratio)}; until then "
            "use fewer DataLoader workers and avoid CPU offload.",
            cause="cpu_oom_killed",
        )
    return c.ok(f"host RAM is {ratio:.1f}× the GPU memory", evidence)


@check("host.cpu_per_gpu", "enough CPU cores per GPU")
def cpu_per_gpu(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Each training process needs a core for itself plus cores for its DataLoader workers
    (decoding, augmentation). Too few cores per GPU starves the GPUs; the threshold is
    configurable (`--min-cores-per-gpu`)."""
    count = facts.nvidia_gpu_count(m)
    if m.cpu is None or not count:
        return c.skip("needs CPU and GPU counts")
    cores = m.cpu.cores or m.cpu.threads
    if cores is None:
        return c.skip("CPU core count not in this snapshot")
    per_gpu = cores / count
    evidence = f"{cores} {'physical cores' if m.cpu.cores else 'threads'} for {count} GPU(s): {per_gpu:.1f} per GPU"
    if per_gpu < o.min_cpu_cores_per_gpu:
        return c.warn(
            f"only {per_gpu:.1f} CPU cores per GPU",
            evidence,
            fix=f"Keep DataLoader num_workers ≤ {max(1, int(per_gpu) - 1)} per GPU, move decoding to the GPU "
            "(DALI, torchvision.io.decode_jpeg on device) or pre-process the dataset; measure with "
            "`dlrig bench dataloader`.",
        )
    return c.ok(f"{per_gpu:.1f} CPU cores per GPU", evidence)


@check("host.shm", "/dev/shm is large enough for DataLoader workers", cause="shm_too_small")
def shm(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """DataLoader workers hand batches to the trainer through shared memory (/dev/shm), and
    NCCL uses it between local ranks. Docker gives containers 64 MB by default; DeepSpeed warns
    below 512 MB. Too little and workers die with 'Bus error' / 'insufficient shared memory'."""
    if m.shm is None or m.shm.total_bytes is None:
        return c.skip("/dev/shm not in this snapshot")
    size = m.shm.total_bytes
    in_container = bool(m.containers and m.containers.in_container)
    fix = (
        "Restart the container with --ipc=host or --shm-size=16g (Kubernetes: mount an emptyDir "
        "with medium: Memory at /dev/shm)"
        if in_container
        else "sudo mount -o remount,size=50% /dev/shm   (persist it in /etc/fstab)"
    )
    evidence = [
        f"/dev/shm: {human_bytes(size)}, {human_bytes(m.shm.free_bytes)} free",
        "check: df -h /dev/shm",
    ]
    if size < 512 * 1024**2:
        return c.fail(f"/dev/shm is only {human_bytes(size)}", *evidence, fix=fix)
    if size < o.min_shm_bytes:
        return c.warn(
            f"/dev/shm is {human_bytes(size)}, small for several DataLoader workers",
            *evidence,
            fix=fix,
        )
    return c.ok(f"/dev/shm is {human_bytes(size)}", *evidence[:1])


@check("host.open_files", "the open-file limit is high enough", cause="too_many_open_files")
def open_files(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """DataLoader workers share tensors through file descriptors, and datasets of many small
    files keep many open. The common default soft limit of 1024 fails with 'Too many open files'
    or 'received 0 items of ancdata'."""
    if m.limits is None or m.limits.open_files_soft is None:
        if m.limits is not None:
            return c.ok("open-file limit is unlimited")
        return c.skip("limits not in this snapshot")
    soft = m.limits.open_files_soft
    hard = m.limits.open_files_hard
    if soft < o.min_open_files:
        wanted = 65536
        if hard is not None and hard < wanted:
            fix = (
                f"raise the hard limit (now {hard}): add '* - nofile {wanted}' to "
                "/etc/security/limits.conf (LimitNOFILE= for services, --ulimit nofile= for docker), "
                f"log in again, then ulimit -n {wanted}"
            )
        else:
            fix = f"ulimit -n {wanted}   (persist in /etc/security/limits.conf or LimitNOFILE=)"
        return c.warn(
            f"open-file limit is {soft}",
            f"soft limit {soft}, hard limit {hard if hard is not None else 'unlimited'}",
            "check: ulimit -n",
            fix=fix,
        )
    return c.ok(f"open-file limit is {soft}")


@check("host.cpu_governor", "CPU frequency governor is 'performance'")
def cpu_governor(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Power-saving governors ramp the clock up only after load appears, which adds latency to
    the bursty CPU work of a training step (data loading, kernel launches)."""
    if m.cpu is None:
        return c.skip("CPU not in this snapshot")
    governor = m.cpu.governor
    if governor is None:
        return c.skip("no cpufreq governor visible (virtual machine or container)")
    if governor != "performance":
        return c.info(
            f"CPU governor is '{governor}'",
            "check: cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
            fix="sudo cpupower frequency-set -g performance   (or tuned-adm profile throughput-performance)",
        )
    return c.ok("CPU governor is 'performance'")


@check("host.cstates", "deep CPU idle states")
def cstates(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Deep C-states save power but take tens to hundreds of microseconds to wake from, which
    shows as jitter in latency-sensitive paths (NCCL proxies, small kernels). Informational."""
    if m.cpu is None or m.cpu.deepest_enabled_cstate is None:
        return c.skip("CPU idle states not visible")
    latency = m.cpu.deepest_enabled_cstate_exit_latency_us
    if latency is not None and latency >= 50:
        return c.info(
            f"deep C-state {m.cpu.deepest_enabled_cstate} enabled (exit latency {latency} µs)",
            fix="For latency-bound workloads: disable deep C-states in the BIOS or boot with "
            "processor.max_cstate=1 intel_idle.max_cstate=1",
        )
    return c.ok(f"deepest enabled C-state {m.cpu.deepest_enabled_cstate}")


@check("host.memory_ecc", "host memory ECC")
def memory_ecc(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Host memory errors corrupt data and crash long runs silently. Linux shows ECC memory
    controllers through EDAC (/sys/devices/system/edac/mc)."""
    if m.memory is None or m.memory.ecc_visible is None:
        return c.skip("EDAC not visible")
    if not m.memory.ecc_visible:
        return c.info("no ECC memory controller visible (non-ECC RAM, or EDAC driver not loaded)")
    if m.memory.ecc_uncorrected_errors:
        return c.fail(
            f"{m.memory.ecc_uncorrected_errors} uncorrected host memory errors",
            "check: grep . /sys/devices/system/edac/mc/mc*/ue_count",
            fix="Find the failing DIMM (edac-util -v, `ras-mc-ctl --errors`) and replace it.",
        )
    return c.ok(
        "host ECC active",
        f"{m.memory.ecc_corrected_errors or 0} corrected errors since boot",
    )

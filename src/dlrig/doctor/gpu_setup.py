"""GPU checks, how the GPUs are set up and used: MIG mode, ECC mode, memory held while idle."""

from __future__ import annotations

from dlrig.doctor import facts
from dlrig.doctor.gpu_evidence import gpu_check, per_gpu
from dlrig.doctor.registry import Check, DoctorOptions
from dlrig.machine.model import Gpu, Machine
from dlrig.report import CheckResult
from dlrig.units import human_bytes


def _mig_line(g: Gpu) -> str:
    sizes = ", ".join(human_bytes(d.memory_total_bytes) for d in g.mig_devices)
    return f"{facts.gpu_label(g)}: {len(g.mig_devices)} MIG instance(s)" + (
        f": {sizes}" if g.mig_devices else ""
    )


@gpu_check("gpu.mig", "MIG mode")
def mig(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """With MIG on, a GPU is split into instances; a training process sees one instance (a
    fraction of the memory and SMs), NCCL cannot span instances, and utilisation counters are
    not reported per GPU."""
    enabled = [g for g in gpus if g.mig_mode_enabled]
    if enabled:
        return per_gpu(
            c.info,
            f"MIG is enabled on {len(enabled)} GPU(s)",
            enabled,
            _mig_line,
            fix="To train on whole GPUs: sudo nvidia-smi -i N -mig 0 (then reset the GPU)",
        )
    if any(g.mig_mode_enabled is False for g in gpus):
        return c.ok("MIG is off")
    return c.skip("MIG mode not reported")


def _on(flag: bool | None) -> str:
    return "on" if flag else "off"


@gpu_check("gpu.ecc_mode", "ECC mode settled")
def ecc_mode(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """A changed ECC mode takes effect only after a reboot or GPU reset; until then the GPU runs
    with the old setting."""
    states = [g for g in gpus if g.ecc_mode_enabled is not None]
    pending = [
        g
        for g in states
        if g.ecc_mode_pending is not None and g.ecc_mode_pending != g.ecc_mode_enabled
    ]
    if pending:
        return per_gpu(
            c.info,
            f"ECC mode change pending on {len(pending)} GPU(s)",
            pending,
            lambda g: (
                f"{facts.gpu_label(g)}: now {_on(g.ecc_mode_enabled)}, after reset "
                f"{_on(g.ecc_mode_pending)}"
            ),
            fix="Reboot or reset the GPU to apply.",
        )
    if not states:
        return c.skip("ECC mode not reported (not supported on this GPU)")
    return per_gpu(
        c.ok,
        "ECC mode settled",
        states,
        lambda g: f"{facts.gpu_label(g)}: ECC {_on(g.ecc_mode_enabled)}",
    )


def _held_bytes(g: Gpu) -> int:
    """Memory held by compute processes (graphics processes of a desktop do not count)."""
    return sum(p.used_memory_bytes or 0 for p in g.processes or () if p.kind != "G")


@gpu_check("gpu.idle_memory", "idle GPUs hold no memory")
def idle_memory(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """Memory held by processes on a GPU doing no work is memory your next job cannot use:
    a crashed run's orphans, a notebook kernel, a stale inference server."""
    held = [
        g
        for g in gpus
        if g.processes is not None
        and facts.busy(g, o.busy_utilization_percent) is False
        and _held_bytes(g) > 1024**3
    ]
    if held:
        return per_gpu(
            c.info,
            f"{len(held)} idle GPU(s) hold memory",
            held,
            lambda g: (
                f"{facts.gpu_label(g)}: {human_bytes(_held_bytes(g))} held by "
                + ", ".join(
                    f"{p.name or '?'} (pid {p.pid})" for p in g.processes or () if p.kind != "G"
                )
            ),
            fix="If these are leftovers: kill the pids listed (check "
            f"`{facts.smi_command(held)}` first).",
        )
    return c.ok("no idle GPU holds significant memory")

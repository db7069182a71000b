"""GPU checks across the GPUs of one machine: one model for all, NVLink up between them."""

from __future__ import annotations

from dlrig.doctor import facts
from dlrig.doctor.gpu_evidence import gpu_check, per_gpu
from dlrig.doctor.registry import Check, DoctorOptions
from dlrig.knowledge import gpus as gpu_knowledge
from dlrig.machine.model import Gpu, Machine
from dlrig.report import CheckResult


@gpu_check("gpu.mixed_models", "all GPUs are the same model", min_gpus=2)
def mixed_models(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """Data-parallel training runs every rank at the speed of the slowest GPU, and a model that
    fits on the largest card may not fit on the smallest."""
    names = sorted({g.name for g in gpus})
    if len(names) > 1:
        return c.warn(
            f"{len(names)} different GPU models in one machine",
            *(
                f"{name}: GPUs {', '.join(str(g.index) for g in gpus if g.name == name)}"
                for name in names
            ),
            fix="Run data-parallel jobs on GPUs of one model (CUDA_VISIBLE_DEVICES=...).",
            cause=None,
        )
    return c.ok(f"{len(gpus)} × {names[0]}")


def _has_nvlink(gpu: Gpu) -> bool:
    spec = gpu_knowledge.catalogue().resolve(gpu.name)
    return bool(spec and spec.form_factor in {"sxm", "oam", "mezzanine"} and spec.nvlink_gbs)


@gpu_check("gpu.nvlink", "NVLink links are up on NVLink GPUs", min_gpus=2)
def nvlink(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """SXM GPUs talk to each other over NVLink (hundreds of GB/s); when links are down, NCCL
    falls back to PCIe or host memory and collectives slow by an order of magnitude.
    `nvidia-smi nvlink -s` shows '<inactive>' for such links; `nvidia-smi topo -m` shows PIX/SYS
    instead of NV# between the GPUs."""
    if m.topology is None or m.topology.nvlink_active_links is None:
        return c.skip("NVLink state not in this snapshot")
    links = m.topology.nvlink_active_links
    down = [g for g in gpus if _has_nvlink(g) and g.index < len(links) and links[g.index] == 0]
    if down:
        return per_gpu(
            c.warn,
            f"{len(down)} NVLink GPU(s) have no active NVLink",
            down,
            lambda g: f"{facts.gpu_label(g)}: 0 active links",
            "nvidia-smi nvlink -s ; nvidia-smi topo -m",
            fix="Check that nvidia-fabricmanager runs on NVSwitch systems (`systemctl status "
            "nvidia-fabricmanager`, same version as the driver); reset the GPUs or reboot; if a "
            "link stays down, run `dcgmi diag -r 3` and contact the vendor.",
            cause=None,
        )
    return c.ok(
        "NVLink links active", *(f"GPU {i}: {n} active link(s)" for i, n in enumerate(links))
    )

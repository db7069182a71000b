"""GPU checks, PCIe: does each GPU's link run at the width and generation it can?"""

from __future__ import annotations

from dlrig.doctor import facts
from dlrig.doctor.gpu_evidence import gpu_check, per_gpu
from dlrig.doctor.registry import Check, DoctorOptions
from dlrig.machine.model import Gpu, Machine
from dlrig.report import CheckResult

QUERY = "nvidia-smi --query-gpu={fields} --format=csv"


@gpu_check("gpu.pcie_width", "PCIe links run at full width")
def pcie_width(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """A GPU whose PCIe link trained at fewer lanes than it supports (x8 of x16) moves host data
    at a fraction of the rate: a card half-seated, a riser, a slot wired x8, or a BIOS lane
    split. Unlike the link generation, the width does not drop to save power at idle on
    datacenter boards."""
    known = [g for g in gpus if g.pcie.width_current is not None and g.pcie.width_max is not None]
    if not known:
        return c.skip("PCIe link width not in this snapshot")
    narrow = [g for g in known if (g.pcie.width_current or 0) < (g.pcie.width_max or 0)]
    if narrow:
        return per_gpu(
            c.warn,
            f"{len(narrow)} GPU(s) run their PCIe link below full width",
            narrow,
            lambda g: f"{facts.gpu_label(g)}: x{g.pcie.width_current} of x{g.pcie.width_max}",
            QUERY.format(fields="index,pcie.link.width.current,pcie.link.width.max")
            + "  and  sudo lspci -vv -d 10de: | grep -E 'LnkCap|LnkSta'",
            fix="Reseat the GPU in a slot wired x16 (see the board manual), remove risers or "
            "extenders, check the BIOS PCIe bifurcation setting; then measure with `dlrig bench memory`.",
        )
    return per_gpu(
        c.ok,
        "every GPU's PCIe link runs at full width",
        known,
        lambda g: f"{facts.gpu_label(g)}: x{g.pcie.width_current}",
    )


@gpu_check("gpu.pcie_gen", "busy GPUs' PCIe links run at full generation")
def pcie_gen(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """GPUs drop their PCIe link to generation 1 when idle to save power; that is by design, so
    the check only judges GPUs that are busy. A busy GPU below its maximum generation points to
    a slot, riser or BIOS forcing an older generation."""
    known = [g for g in gpus if g.pcie.gen_current is not None and g.pcie.gen_max is not None]
    if not known:
        return c.skip("PCIe link generation not in this snapshot")
    slow = [g for g in known if (g.pcie.gen_current or 0) < (g.pcie.gen_max or 0)]
    slow_busy = [g for g in slow if facts.busy(g, o.busy_utilization_percent)]
    slow_idle = [g for g in slow if g not in slow_busy]
    if slow_busy:
        return per_gpu(
            c.warn,
            f"{len(slow_busy)} busy GPU(s) run PCIe below their maximum generation",
            slow_busy,
            lambda g: (
                f"{facts.gpu_label(g)}: gen {g.pcie.gen_current} of {g.pcie.gen_max} at "
                f"{g.utilization_gpu_percent:.0f}% utilisation"
            ),
            QUERY.format(fields="index,utilization.gpu,pcie.link.gen.current,pcie.link.gen.max"),
            fix="Set the slot to Auto/Gen4/Gen5 in the BIOS, remove risers, reseat the card; "
            "measure with `dlrig bench memory`.",
        )
    if slow_idle:
        return per_gpu(
            c.ok,
            "PCIe generation below maximum only on idle GPUs (power saving, expected)",
            slow_idle,
            lambda g: f"{facts.gpu_label(g)}: gen {g.pcie.gen_current} of {g.pcie.gen_max}, idle",
        )
    return c.ok("every GPU's PCIe link runs at its maximum generation")

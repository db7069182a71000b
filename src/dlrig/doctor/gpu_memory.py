"""GPU checks, memory health: ECC errors, retired pages (before Ampere), remapped rows (Ampere
and newer). `nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT` shows the same counters."""

from __future__ import annotations

from collections.abc import Callable

from dlrig.doctor import facts
from dlrig.doctor.gpu_evidence import gpu_check, per_gpu
from dlrig.doctor.registry import Check, DoctorOptions
from dlrig.machine.model import Gpu, Machine
from dlrig.report import CheckResult


@gpu_check("gpu.ecc_errors", "no uncorrectable GPU memory errors", "gpu_ecc_error")
def ecc_errors(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """Uncorrectable (double-bit) ECC errors kill the process that hit them and mean the memory
    is failing or a row must be remapped. Volatile counts reset at reboot; aggregate counts are
    for the GPU's life. Corrected errors are normal in small numbers."""
    known = [
        g
        for g in gpus
        if g.ecc_errors.volatile_uncorrected is not None
        or g.ecc_errors.aggregate_uncorrected is not None
    ]
    if not known:
        return c.skip("ECC counters not available (ECC off or not supported, e.g. GeForce)")
    bad = [
        g
        for g in known
        if (g.ecc_errors.volatile_uncorrected or 0) > 0
        or (g.ecc_errors.aggregate_uncorrected or 0) > 0
    ]
    corrected = [
        g
        for g in known
        if g not in bad
        and (
            (g.ecc_errors.volatile_corrected or 0) > 0
            or (g.ecc_errors.aggregate_corrected or 0) > 0
        )
    ]
    if bad:
        return per_gpu(
            c.fail,
            f"uncorrectable ECC errors on {len(bad)} GPU(s)",
            bad,
            lambda g: (
                f"{facts.gpu_label(g)}: uncorrectable volatile "
                f"{g.ecc_errors.volatile_uncorrected}, aggregate {g.ecc_errors.aggregate_uncorrected}"
            ),
            "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT",
            fix="Drain the node, reset the GPU (`sudo nvidia-smi -r -i N`) or reboot so pending "
            "remaps take effect, then run `dcgmi diag -r 3`; RMA if errors return.",
        )
    if corrected:
        return per_gpu(
            c.info,
            f"corrected ECC errors on {len(corrected)} GPU(s) (normal in small numbers)",
            corrected,
            lambda g: (
                f"{facts.gpu_label(g)}: corrected volatile "
                f"{g.ecc_errors.volatile_corrected}, aggregate {g.ecc_errors.aggregate_corrected}"
            ),
        )
    return c.ok("no ECC errors")


def _listed(
    result: Callable[..., CheckResult], what: str, gpus: list[Gpu], command: str, fix: str
) -> CheckResult | None:
    """ "<what> on N GPU(s)" naming each, or None when `gpus` is empty."""
    if not gpus:
        return None
    return per_gpu(result, f"{what} on {len(gpus)} GPU(s)", gpus, check_command=command, fix=fix)


@gpu_check("gpu.retired_pages", "no pending page retirement", "gpu_ecc_error")
def retired_pages(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """GPUs before Ampere retire memory pages with repeated or double-bit errors. A retirement
    is 'pending' until the next driver reload: until then the bad page can still be handed out."""
    pages = [(g, g.retired_pages) for g in gpus]
    if not any(p.pending is not None or p.double_bit is not None for _, p in pages):
        return c.skip("page retirement not reported (Ampere and newer use row remapping)")
    retired = [g for g, p in pages if (p.single_bit or 0) + (p.double_bit or 0) > 0]
    return _listed(
        c.warn,
        "page retirement pending",
        [g for g, p in pages if p.pending],
        "nvidia-smi -q -d PAGE_RETIREMENT",
        "Reset the GPU (`sudo nvidia-smi -r -i N`, no processes on it) or reboot.",
    ) or (
        per_gpu(
            c.info,
            f"retired pages on {len(retired)} GPU(s)",
            retired,
            lambda g: (
                f"{facts.gpu_label(g)}: single-bit {g.retired_pages.single_bit}, "
                f"double-bit {g.retired_pages.double_bit}"
            ),
        )
        if retired
        else c.ok("no retired or pending pages")
    )


@gpu_check("gpu.row_remap", "no pending or failed row remapping", "gpu_ecc_error")
def row_remap(c: Check, gpus: tuple[Gpu, ...], m: Machine, o: DoctorOptions) -> CheckResult:
    """Ampere and newer GPUs remap memory rows that had uncorrectable errors. A pending remap
    takes effect at the next GPU reset; a remapping failure means the GPU ran out of spare rows,
    which NVIDIA treats as a reason to replace the GPU."""
    rows = [(g, g.remapped_rows) for g in gpus]
    known = [g for g, r in rows if r.pending is not None or r.failure is not None]
    if not known:
        return c.skip("row remapping not reported by these GPUs")
    command = "nvidia-smi -q -d ROW_REMAPPER"
    return (
        _listed(
            c.fail,
            "row remapping FAILED",
            [g for g, r in rows if r.failure],
            command,
            "Drain the node and RMA the GPU (NVIDIA: a remapping failure is an RMA criterion).",
        )
        or _listed(
            c.warn,
            "row remap pending",
            [g for g, r in rows if r.pending],
            command,
            "Reset the GPU when idle (`sudo nvidia-smi -r -i N`) or reboot so the remap takes effect.",
        )
        or per_gpu(
            c.ok,
            "no pending or failed row remaps",
            known,
            lambda g: (
                f"{facts.gpu_label(g)}: {g.remapped_rows.correctable or 0} correctable, "
                f"{g.remapped_rows.uncorrectable or 0} uncorrectable remapped rows"
            ),
        )
    )

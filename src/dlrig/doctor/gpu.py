"""GPU checks: architecture vs build, PCIe link, memory health, throttling, Xid errors."""

from __future__ import annotations

from dlrig.doctor import facts
from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge import pytorch as torch_knowledge
from dlrig.knowledge import xid as xid_knowledge
from dlrig.knowledge.versions import Version, local_variant, minor_of
from dlrig.machine.model import Gpu, Machine
from dlrig.report import CheckResult
from dlrig.units import human_bytes

_QUERY = "nvidia-smi --query-gpu={fields} --format=csv"


def _arch_tokens(arch_list: tuple[str, ...]) -> tuple[set[Version], set[Version]]:
    """(cubin capabilities, PTX capabilities) from torch's "sm_86 compute_90" list."""
    cubins: set[Version] = set()
    ptx: set[Version] = set()
    for token in arch_list:
        kind, _, digits = token.partition("_")
        digits = digits.rstrip("af")
        if not digits.isdigit() or len(digits) < 2:
            continue
        version = Version((int(digits[:-1]), int(digits[-1])))
        (cubins if kind == "sm" else ptx).add(version)
    return cubins, ptx


def _runs_on(arch_list: tuple[str, ...], capability: str, build_cuda: str | None) -> bool:
    """Cubins of the same major and an equal or lower minor run; PTX of a lower version is
    JIT-compiled, but only if the build's CUDA already knows the GPU's architecture."""
    wanted = Version.parse(capability)
    if wanted is None:
        return True
    cubins, ptx = _arch_tokens(arch_list)
    if any(c.major == wanted.major and c.minor <= wanted.minor for c in cubins):
        return True
    if not any(p <= wanted for p in ptx):
        return False
    needed = cuda_knowledge.first_cuda_for(f"{wanted.major}.{wanted.minor}")
    built = Version.parse(build_cuda) if build_cuda else None
    return needed is None or built is None or built.truncated(2) >= needed


def _installed_arch_list(m: Machine) -> tuple[tuple[str, ...] | None, str]:
    """torch's architecture list and where it comes from (the build itself, or the table)."""
    info = facts.torch(m)
    if info is None:
        return None, ""
    if info.arch_list:
        return info.arch_list, "the installed build (torch.cuda.get_arch_list())"
    build_cuda = facts.torch_cuda(m)
    if build_cuda is None:
        return None, ""
    variant = local_variant(info.version)
    if not (variant and variant.startswith("cu")):
        variant = torch_knowledge.variant_for_cuda(info.version, build_cuda)
    if variant is None:
        return None, ""
    entry = torch_knowledge.arch_list(info.version, variant)
    if entry is None:
        return None, ""
    tokens = tuple(f"sm_{c.replace('.', '')}" for c in entry.compute_capabilities)
    if entry.ptx:
        tokens += (f"compute_{entry.ptx.replace('.', '')}",)
    return (
        tokens,
        f"the published list for torch {minor_of(info.version)} {variant} ({entry.confidence} confidence)",
    )


def _suggest_build(capability: str, torch_version: str) -> str:
    """A concrete install command for a build that runs on this architecture."""
    supporting = torch_knowledge.variants_supporting(capability)
    if not supporting:
        return "no published PyTorch wheel supports this GPU; build from source with TORCH_CUDA_ARCH_LIST"
    minor = minor_of(torch_version)
    same_release = [e for e in supporting if e.torch_version == minor]
    pick = same_release[0] if same_release else supporting[0]
    return (
        f"pip install --force-reinstall torch=={pick.torch_version}.* torchvision torchaudio "
        f"--index-url https://download.pytorch.org/whl/{pick.cuda_variant}"
    )


@check(
    "gpu.arch_in_torch",
    "gpu",
    "each GPU's architecture is in torch's build",
    cause="no_kernel_image",
)
def arch_in_torch(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """PyTorch wheels carry GPU machine code for a list of compute capabilities
    (`torch.cuda.get_arch_list()`). A GPU runs the code of its own major version with an equal or
    lower minor (8.0 code runs on 8.6), or PTX of a lower version after JIT compilation. Anything
    else fails with 'no kernel image is available for execution on the device'. RTX 50xx
    (sm_120) needs cu128 or newer wheels; Maxwell, Pascal and Volta were dropped from cu128+
    wheels of recent releases."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    info = facts.torch(m)
    if info is None or facts.torch_cuda(m) is None:
        return c.skip("torch is not a CUDA build")
    arch_list, origin = _installed_arch_list(m)
    if arch_list is None:
        return _older_than_any_build(c, m, info.version)
    missing = []
    unknown = []
    for gpu in m.gpus:
        capability, _ = facts.capability(gpu)
        if capability is None:
            unknown.append(gpu)
        elif not _runs_on(arch_list, capability, facts.torch_cuda(m)):
            missing.append((gpu, capability))
    evidence = [f"torch {info.version} ships: {' '.join(arch_list)} (from {origin})"]
    if missing:
        gpu, capability = missing[0]
        return c.fail(
            f"{facts.gpu_label(gpu)} is {facts.sm(capability)}, which torch {info.version} has no kernels for",
            *evidence,
            *(f"{facts.gpu_label(g)}: compute capability {cap}" for g, cap in missing),
            'check: python -c "import torch; print(torch.cuda.get_arch_list())"',
            fix=_suggest_build(capability, info.version),
        )
    if unknown and len(unknown) == len(m.gpus):
        return c.skip("compute capability of the GPUs unknown", *evidence)
    return c.ok(f"torch {info.version} has kernels for every GPU's architecture", *evidence)


def _older_than_any_build(c: Check, m: Machine, torch_version: str) -> CheckResult:
    """Without the build's own list: a GPU older than every published PyTorch build still fails."""
    oldest = min(
        (
            Version.parse(cap)
            for e in torch_knowledge.arch_lists()
            for cap in e.compute_capabilities
        ),
        default=None,
        key=lambda v: v or Version((99,)),
    )
    assert m.gpus is not None
    for gpu in m.gpus:
        capability, source = facts.capability(gpu)
        version = Version.parse(capability) if capability else None
        if version is not None and oldest is not None and version < oldest:
            return c.fail(
                f"{facts.gpu_label(gpu)} (compute capability {capability}) is older than any "
                f"architecture PyTorch builds ship (oldest: {oldest})",
                f"torch {torch_version}; compute capability from {source}",
                fix="This GPU cannot run PyTorch's CUDA builds: use the CPU build, build PyTorch from "
                "source for this architecture (if its CUDA still supports it), or use a newer GPU.",
            )
    return c.skip(f"torch {torch_version}: architecture list unknown")


@check(
    "gpu.torch_too_old",
    "gpu",
    "PyTorch release supports the GPU architecture",
    cause="no_kernel_image",
)
def torch_too_old(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """New GPU architectures need a PyTorch release that knows them: Blackwell GeForce (sm_120)
    first shipped in 2.7 (cu128 wheels), Hopper (sm_90) in 2.0 (cu118). No wheel variant of an
    older release can run there, so the fix is to upgrade torch, not to reinstall."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    info = facts.torch(m)
    if info is None:
        return c.skip("torch is not installed")
    release = Version.parse(minor_of(info.version))
    if release is None:
        return c.skip(f"cannot read torch version {info.version!r}")
    known_releases = {Version.parse(e.torch_version) for e in torch_knowledge.arch_lists()}
    if release not in known_releases:
        return c.skip(f"torch {minor_of(info.version)} is not in the release table")
    too_old = []
    for gpu in m.gpus:
        capability, _ = facts.capability(gpu)
        if capability is None:
            continue
        supporting = torch_knowledge.variants_supporting(capability)
        releases = sorted(
            v for v in {Version.parse(e.torch_version) for e in supporting} if v is not None
        )
        if releases and release < releases[0]:
            too_old.append((gpu, capability, str(releases[0])))
    if too_old:
        gpu, capability, first = too_old[0]
        return c.fail(
            f"torch {info.version} predates {facts.gpu_label(gpu)} ({facts.sm(capability)}): first "
            f"supported in torch {first}",
            *(f"{facts.gpu_label(g)}: {facts.sm(cap)} needs torch ≥ {f}" for g, cap, f in too_old),
            fix=_suggest_build(capability, first),
        )
    return c.ok(f"torch {minor_of(info.version)} has a build for every GPU's architecture")


@check("gpu.pcie_width", "gpu", "PCIe links run at full width")
def pcie_width(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """A GPU whose PCIe link trained at fewer lanes than it supports (x8 of x16) moves host data
    at a fraction of the rate: a card half-seated, a riser, a slot wired x8, or a BIOS lane
    split. Unlike the link generation, the width does not drop to save power at idle on
    datacenter boards."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    narrow = [
        g
        for g in m.gpus
        if g.pcie.width_current is not None
        and g.pcie.width_max is not None
        and g.pcie.width_current < g.pcie.width_max
    ]
    known = [g for g in m.gpus if g.pcie.width_current is not None and g.pcie.width_max is not None]
    if not known:
        return c.skip("PCIe link width not in this snapshot")
    if narrow:
        return c.warn(
            f"{len(narrow)} GPU(s) run their PCIe link below full width",
            *(
                f"{facts.gpu_label(g)}: x{g.pcie.width_current} of x{g.pcie.width_max}"
                for g in narrow
            ),
            "check: "
            + _QUERY.format(fields="index,pcie.link.width.current,pcie.link.width.max")
            + "  and  sudo lspci -vv -d 10de: | grep -E 'LnkCap|LnkSta'",
            fix="Reseat the GPU in a slot wired x16 (see the board manual), remove risers or "
            "extenders, check the BIOS PCIe bifurcation setting; then measure with `dlrig bench memory`.",
        )
    return c.ok(
        "every GPU's PCIe link runs at full width",
        *(f"{facts.gpu_label(g)}: x{g.pcie.width_current}" for g in known),
    )


@check("gpu.pcie_gen", "gpu", "busy GPUs' PCIe links run at full generation")
def pcie_gen(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """GPUs drop their PCIe link to generation 1 when idle to save power; that is by design, so
    the check only judges GPUs that are busy. A busy GPU below its maximum generation points to
    a slot, riser or BIOS forcing an older generation."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    slow_busy = []
    slow_idle = []
    known = 0
    for g in m.gpus:
        if g.pcie.gen_current is None or g.pcie.gen_max is None:
            continue
        known += 1
        if g.pcie.gen_current < g.pcie.gen_max:
            if facts.busy(g, o.busy_utilization_percent):
                slow_busy.append(g)
            else:
                slow_idle.append(g)
    if not known:
        return c.skip("PCIe link generation not in this snapshot")
    if slow_busy:
        return c.warn(
            f"{len(slow_busy)} busy GPU(s) run PCIe below their maximum generation",
            *(
                f"{facts.gpu_label(g)}: gen {g.pcie.gen_current} of {g.pcie.gen_max} at "
                f"{g.utilization_gpu_percent:.0f}% utilisation"
                for g in slow_busy
            ),
            "check: "
            + _QUERY.format(fields="index,utilization.gpu,pcie.link.gen.current,pcie.link.gen.max"),
            fix="Set the slot to Auto/Gen4/Gen5 in the BIOS, remove risers, reseat the card; "
            "measure with `dlrig bench memory`.",
        )
    if slow_idle:
        return c.ok(
            "PCIe generation below maximum only on idle GPUs (power saving, expected)",
            *(
                f"{facts.gpu_label(g)}: gen {g.pcie.gen_current} of {g.pcie.gen_max}, idle"
                for g in slow_idle
            ),
        )
    return c.ok("every GPU's PCIe link runs at its maximum generation")


def _sum(values: list[int | None]) -> int:
    return sum(v for v in values if v)


@check("gpu.ecc_errors", "gpu", "no uncorrectable GPU memory errors", cause="gpu_ecc_error")
def ecc_errors(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Uncorrectable (double-bit) ECC errors kill the process that hit them and mean the memory
    is failing or a row must be remapped. Volatile counts reset at reboot; aggregate counts are
    for the GPU's life. Corrected errors are normal in small numbers."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    bad = []
    corrected = []
    known = False
    for g in m.gpus:
        e = g.ecc_errors
        if e.volatile_uncorrected is None and e.aggregate_uncorrected is None:
            continue
        known = True
        if (e.volatile_uncorrected or 0) > 0 or (e.aggregate_uncorrected or 0) > 0:
            bad.append(g)
        elif (e.volatile_corrected or 0) > 0 or (e.aggregate_corrected or 0) > 0:
            corrected.append(g)
    if not known:
        return c.skip("ECC counters not available (ECC off or not supported, e.g. GeForce)")
    if bad:
        return c.fail(
            f"uncorrectable ECC errors on {len(bad)} GPU(s)",
            *(
                f"{facts.gpu_label(g)}: uncorrectable volatile {g.ecc_errors.volatile_uncorrected}, "
                f"aggregate {g.ecc_errors.aggregate_uncorrected}"
                for g in bad
            ),
            "check: nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT",
            fix="Drain the node, reset the GPU (`sudo nvidia-smi -r -i N`) or reboot so pending "
            "remaps take effect, then run `dcgmi diag -r 3`; RMA if errors return.",
        )
    if corrected:
        return c.info(
            f"corrected ECC errors on {len(corrected)} GPU(s) (normal in small numbers)",
            *(
                f"{facts.gpu_label(g)}: corrected volatile {g.ecc_errors.volatile_corrected}, "
                f"aggregate {g.ecc_errors.aggregate_corrected}"
                for g in corrected
            ),
        )
    return c.ok("no ECC errors")


@check("gpu.retired_pages", "gpu", "no pending page retirement", cause="gpu_ecc_error")
def retired_pages(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """GPUs before Ampere retire memory pages with repeated or double-bit errors. A retirement
    is 'pending' until the next driver reload: until then the bad page can still be handed out."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    pending = [g for g in m.gpus if g.retired_pages.pending]
    retired = [
        g for g in m.gpus if _sum([g.retired_pages.single_bit, g.retired_pages.double_bit]) > 0
    ]
    known = [
        g
        for g in m.gpus
        if g.retired_pages.pending is not None or g.retired_pages.double_bit is not None
    ]
    if not known:
        return c.skip("page retirement not reported (Ampere and newer use row remapping)")
    if pending:
        return c.warn(
            f"page retirement pending on {len(pending)} GPU(s)",
            *(facts.gpu_label(g) for g in pending),
            "check: nvidia-smi -q -d PAGE_RETIREMENT",
            fix="Reset the GPU (`sudo nvidia-smi -r -i N`, no processes on it) or reboot.",
        )
    if retired:
        return c.info(
            f"retired pages on {len(retired)} GPU(s)",
            *(
                f"{facts.gpu_label(g)}: single-bit {g.retired_pages.single_bit}, double-bit "
                f"{g.retired_pages.double_bit}"
                for g in retired
            ),
        )
    return c.ok("no retired or pending pages")


@check("gpu.row_remap", "gpu", "no pending or failed row remapping", cause="gpu_ecc_error")
def row_remap(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Ampere and newer GPUs remap memory rows that had uncorrectable errors. A pending remap
    takes effect at the next GPU reset; a remapping failure means the GPU ran out of spare rows,
    which NVIDIA treats as a reason to replace the GPU."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    failed = [g for g in m.gpus if g.remapped_rows.failure]
    pending = [g for g in m.gpus if g.remapped_rows.pending]
    known = [
        g
        for g in m.gpus
        if g.remapped_rows.pending is not None or g.remapped_rows.failure is not None
    ]
    if not known:
        return c.skip("row remapping not reported by these GPUs")
    if failed:
        return c.fail(
            f"row remapping FAILED on {len(failed)} GPU(s)",
            *(facts.gpu_label(g) for g in failed),
            "check: nvidia-smi -q -d ROW_REMAPPER",
            fix="Drain the node and RMA the GPU (NVIDIA: a remapping failure is an RMA criterion).",
        )
    if pending:
        return c.warn(
            f"row remap pending on {len(pending)} GPU(s)",
            *(facts.gpu_label(g) for g in pending),
            "check: nvidia-smi -q -d ROW_REMAPPER",
            fix="Reset the GPU when idle (`sudo nvidia-smi -r -i N`) or reboot so the remap takes effect.",
        )
    return c.ok(
        "no pending or failed row remaps",
        *(
            f"{facts.gpu_label(g)}: {g.remapped_rows.correctable or 0} correctable, "
            f"{g.remapped_rows.uncorrectable or 0} uncorrectable remapped rows"
            for g in known
        ),
    )


_THROTTLE = {
    "hw_slowdown": "HW slowdown (power brake or thermal, set by the board)",
    "hw_thermal_slowdown": "HW thermal slowdown",
    "hw_power_brake_slowdown": "HW power brake (external power signal)",
    "sw_thermal_slowdown": "SW thermal slowdown",
}


@check("gpu.throttle", "gpu", "no thermal or hardware clock slowdown")
def throttle(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """nvidia-smi's 'clocks event reasons' say why clocks are below maximum. Idle and the
    software power cap are normal; thermal and hardware slowdowns mean cooling, airflow or power
    delivery is not keeping up and every step runs slower."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    hot = []
    capped = []
    known = False
    for g in m.gpus:
        if g.clocks_event_reasons is None:
            continue
        known = True
        active = [r for r in g.clocks_event_reasons if r in _THROTTLE]
        if active:
            hot.append((g, active))
        elif "sw_power_cap" in g.clocks_event_reasons:
            capped.append(g)
    if not known:
        return c.skip("clock event reasons not in this snapshot")
    if hot:
        return c.warn(
            f"{len(hot)} GPU(s) are slowed down by thermal or hardware limits",
            *(
                f"{facts.gpu_label(g)}: {', '.join(_THROTTLE[r] for r in active)}"
                + (f", {g.temperature_c:.0f} °C" if g.temperature_c is not None else "")
                for g, active in hot
            ),
            "check: nvidia-smi -q -d PERFORMANCE",
            fix="Improve cooling (fan curves, airflow, blanking panels, room temperature); check "
            "PSU capacity and the GPU's power cables; for HW power brake check the chassis' power "
            "management.",
        )
    if capped:
        return c.info(
            f"{len(capped)} GPU(s) at their power cap (normal under full load)",
            *(
                f"{facts.gpu_label(g)}: {g.power_draw_watts or 0:.0f} W of {g.power_limit_watts or 0:.0f} W"
                for g in capped
            ),
        )
    return c.ok("no thermal or hardware slowdown")


@check("gpu.temperature", "gpu", "GPU temperatures below the slowdown threshold")
def temperature(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Within a few degrees of its slowdown threshold a GPU starts to lower its clocks."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    near = []
    temps = []
    for g in m.gpus:
        if g.temperature_c is None:
            continue
        temps.append(f"{facts.gpu_label(g)}: {g.temperature_c:.0f} °C")
        # Thresholds of 20 °C or less are T.Limit-relative readings, not absolute degrees.
        if (
            g.temperature_slowdown_c
            and g.temperature_slowdown_c > 20
            and g.temperature_c >= g.temperature_slowdown_c - 5
        ):
            near.append(g)
    if not temps:
        return c.skip("temperatures not in this snapshot")
    if near:
        return c.warn(
            f"{len(near)} GPU(s) within 5 °C of thermal slowdown",
            *(
                f"{facts.gpu_label(g)}: {g.temperature_c:.0f} °C, slowdown at {g.temperature_slowdown_c:.0f} °C"
                for g in near
            ),
            fix="Improve cooling and airflow; check fans (`nvidia-smi -q -d TEMPERATURE`).",
        )
    return c.ok("GPU temperatures normal", *temps)


@check("gpu.power_limit", "gpu", "power limits are at their defaults")
def power_limit(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """A power limit set below the board's default (`nvidia-smi -pl`) caps throughput; it is
    sometimes deliberate (noise, PSU headroom), often forgotten."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    low = [
        g
        for g in m.gpus
        if g.power_limit_watts
        and g.power_default_limit_watts
        and g.power_limit_watts < 0.9 * g.power_default_limit_watts
    ]
    known = [g for g in m.gpus if g.power_limit_watts and g.power_default_limit_watts]
    if not known:
        return c.skip("power limits not in this snapshot")
    if low:
        return c.warn(
            f"{len(low)} GPU(s) have a power limit below their default",
            *(
                f"{facts.gpu_label(g)}: limit {g.power_limit_watts:.0f} W, default {g.power_default_limit_watts:.0f} W"
                for g in low
            ),
            "check: nvidia-smi -q -d POWER",
            fix="If not deliberate: sudo nvidia-smi -i N -pl <default watts>",
        )
    return c.ok("power limits at their defaults")


@check("gpu.mig", "gpu", "MIG mode")
def mig(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """With MIG on, a GPU is split into instances; a training process sees one instance (a
    fraction of the memory and SMs), NCCL cannot span instances, and utilisation counters are
    not reported per GPU."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    enabled = [g for g in m.gpus if g.mig_mode_enabled]
    if enabled:
        return c.info(
            f"MIG is enabled on {len(enabled)} GPU(s)",
            *(
                f"{facts.gpu_label(g)}: {len(g.mig_devices)} MIG instance(s)"
                + (
                    ": " + ", ".join(human_bytes(d.memory_total_bytes) for d in g.mig_devices)
                    if g.mig_devices
                    else ""
                )
                for g in enabled
            ),
            fix="To train on whole GPUs: sudo nvidia-smi -i N -mig 0 (then reset the GPU)",
        )
    if any(g.mig_mode_enabled is False for g in m.gpus):
        return c.ok("MIG is off")
    return c.skip("MIG mode not reported")


@check("gpu.ecc_mode", "gpu", "ECC mode settled")
def ecc_mode(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """A changed ECC mode takes effect only after a reboot or GPU reset; until then the GPU runs
    with the old setting."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    pending = [
        g
        for g in m.gpus
        if g.ecc_mode_pending is not None
        and g.ecc_mode_enabled is not None
        and g.ecc_mode_pending != g.ecc_mode_enabled
    ]
    if pending:
        return c.info(
            f"ECC mode change pending on {len(pending)} GPU(s)",
            *(
                f"{facts.gpu_label(g)}: now {'on' if g.ecc_mode_enabled else 'off'}, after reset "
                f"{'on' if g.ecc_mode_pending else 'off'}"
                for g in pending
            ),
            fix="Reboot or reset the GPU to apply.",
        )
    states = [g for g in m.gpus if g.ecc_mode_enabled is not None]
    if not states:
        return c.skip("ECC mode not reported (not supported on this GPU)")
    return c.ok(
        "ECC mode settled",
        *(f"{facts.gpu_label(g)}: ECC {'on' if g.ecc_mode_enabled else 'off'}" for g in states),
    )


@check("gpu.idle_memory", "gpu", "idle GPUs hold no memory")
def idle_memory(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Memory held by processes on a GPU doing no work is memory your next job cannot use:
    a crashed run's orphans, a notebook kernel, a stale inference server."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    held = []
    for g in m.gpus:
        if g.processes is None or facts.busy(g, o.busy_utilization_percent) is not False:
            continue
        used = sum(p.used_memory_bytes or 0 for p in g.processes if p.kind != "G")
        if used > 1024**3:
            held.append((g, used))
    if held:
        return c.info(
            f"{len(held)} idle GPU(s) hold memory",
            *(
                f"{facts.gpu_label(g)}: {human_bytes(used)} held by "
                + ", ".join(
                    f"{p.name or '?'} (pid {p.pid})" for p in g.processes or () if p.kind != "G"
                )
                for g, used in held
            ),
            fix="If these are leftovers: kill the pids listed (check `nvidia-smi` first).",
        )
    return c.ok("no idle GPU holds significant memory")


def _xid_cause(code: int) -> str:
    if code == 79:
        return "gpu_fell_off_bus"
    if code in {48, 63, 64, 94, 95}:
        return "gpu_ecc_error"
    return "xid_error"


@check("gpu.xid_events", "gpu", "no Xid errors in the kernel log", cause="xid_error")
def xid_events(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """The NVIDIA driver reports GPU errors as 'NVRM: Xid' lines in the kernel log. Each code
    has a meaning and a likely culprit (application, driver, hardware) in NVIDIA's Xid
    catalogue; dlrig ranks them by that severity."""
    if m.kernel_log is None:
        return c.skip("kernel log not in this snapshot")
    events = m.kernel_log.xid_events
    if not events:
        return c.ok("no Xid errors in the kernel log")
    by_code: dict[int, int] = {}
    for event in events:
        by_code[event.code] = by_code.get(event.code, 0) + 1
    ranked = []
    for code, count in by_code.items():
        info = xid_knowledge.lookup(code)
        severity = info.severity if info else "warn"
        ranked.append((("critical", "warn", "info").index(severity), code, count, info))
    ranked.sort()
    worst_rank, worst_code, _, worst_info = ranked[0]
    evidence = []
    for _, code, count, info in ranked:
        name = info.name if info else "not in the Xid table"
        culprit = "/".join(info.culprits) if info and info.culprits else "unknown"
        evidence.append(
            f"Xid {code} ×{count}: {name} (likely {culprit}; {info.severity if info else 'unknown'})"
        )
    sample = next(e for e in events if e.code == worst_code)
    evidence.append(
        f"e.g. {sample.timestamp or ''} PCI {sample.pci_bus_id or '?'}: {sample.message or ''}".strip()[
            :240
        ]
    )
    evidence.append("check: sudo dmesg -T | grep -i xid")
    fix = worst_info.action if worst_info else "Look the code up in NVIDIA's Xid catalogue."
    title = f"Xid {worst_code} in the kernel log" + (f": {worst_info.name}" if worst_info else "")
    if worst_rank == 0:
        return c.fail(title, *evidence, fix=fix, cause=_xid_cause(worst_code))
    if worst_rank == 1:
        return c.warn(title, *evidence, fix=fix, cause=_xid_cause(worst_code))
    return c.info(title, *evidence, fix=fix)


@check("gpu.mixed_models", "gpu", "all GPUs are the same model")
def mixed_models(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Data-parallel training runs every rank at the speed of the slowest GPU, and a model that
    fits on the largest card may not fit on the smallest."""
    if not m.gpus or len(m.gpus) < 2:
        return c.skip("fewer than two GPUs")
    names = sorted({g.name for g in m.gpus})
    if len(names) > 1:
        return c.warn(
            f"{len(names)} different GPU models in one machine",
            *(
                f"{name}: GPUs {', '.join(str(g.index) for g in m.gpus if g.name == name)}"
                for name in names
            ),
            fix="Run data-parallel jobs on GPUs of one model (CUDA_VISIBLE_DEVICES=...).",
            cause=None,
        )
    return c.ok(f"{len(m.gpus)} × {names[0]}")


def _gpu_names(gpus: tuple[Gpu, ...]) -> str:
    return ", ".join(sorted({g.name for g in gpus}))


@check("gpu.nvlink", "gpu", "NVLink links are up on NVLink GPUs")
def nvlink(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """SXM GPUs talk to each other over NVLink (hundreds of GB/s); when links are down, NCCL
    falls back to PCIe or host memory and collectives slow by an order of magnitude.
    `nvidia-smi nvlink -s` shows '<inactive>' for such links; `nvidia-smi topo -m` shows PIX/SYS
    instead of NV# between the GPUs."""
    if not m.gpus or len(m.gpus) < 2:
        return c.skip("fewer than two GPUs")
    if m.topology is None or m.topology.nvlink_active_links is None:
        return c.skip("NVLink state not in this snapshot")
    from dlrig.knowledge import gpus as gpu_knowledge

    expected = []
    for gpu in m.gpus:
        spec = gpu_knowledge.catalogue().resolve(gpu.name)
        if spec is not None and spec.form_factor in {"sxm", "oam", "mezzanine"} and spec.nvlink_gbs:
            expected.append(gpu)
    links = m.topology.nvlink_active_links
    down = [g for g in expected if g.index < len(links) and links[g.index] == 0]
    if down:
        return c.warn(
            f"{len(down)} NVLink GPU(s) have no active NVLink",
            *(f"{facts.gpu_label(g)}: 0 active links" for g in down),
            "check: nvidia-smi nvlink -s ; nvidia-smi topo -m",
            fix="Check that nvidia-fabricmanager runs on NVSwitch systems (`systemctl status "
            "nvidia-fabricmanager`, same version as the driver); reset the GPUs or reboot; if a "
            "link stays down, run `dcgmi diag -r 3` and contact the vendor.",
            cause=None,
        )
    active = [f"GPU {i}: {n} active link(s)" for i, n in enumerate(links)]
    return c.ok("NVLink links active", *active)

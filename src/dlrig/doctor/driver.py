"""Driver checks: is a driver loaded, does it match its libraries, is it new enough."""

from __future__ import annotations

from dlrig.doctor import facts, installs
from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge import drivers as driver_knowledge
from dlrig.knowledge.resolver import resolve
from dlrig.knowledge.versions import Version
from dlrig.machine.model import Machine
from dlrig.report import CheckResult, Status


@check("driver.loaded", "NVIDIA GPUs have a working driver", cause="no_nvidia_driver")
def driver_loaded(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """An NVIDIA GPU needs the NVIDIA kernel driver bound to it before nvidia-smi, NVML or
    CUDA can reach it. The check compares the NVIDIA display/3D controllers on the PCI bus
    (`lspci -d 10de:`) with what the driver reports. A machine without NVIDIA GPUs is not a
    failure: it is reported as CPU-only."""
    d = m.driver
    gpus = facts.nvidia_gpus(m)
    if d is None and not gpus:
        return c.skip("driver state not in this snapshot")
    gpus = gpus or ()
    no_driver_text = d.nvml_error if d and d.nvml_error else ""
    lowered = no_driver_text.lower()
    driver_missing = d is not None and (
        "no nvidia driver" in lowered
        or "couldn't communicate" in lowered
        or d.kernel_module_loaded is False
    )
    devices = d.nvidia_pci_devices if d else None
    if driver_missing and (devices or gpus):
        return c.fail(
            "NVIDIA driver not loaded"
            + (f" although {devices} NVIDIA GPU(s) are on the PCI bus" if devices else ""),
            *([f"NVML/driver says: {no_driver_text}"] if no_driver_text else []),
            *(
                ["kernel module: not loaded (/proc/driver/nvidia/version absent)"]
                if d is not None and d.kernel_module_loaded is False
                else []
            ),
            "check: lspci -nnk -d 10de: | grep -A3 -i nvidia ; lsmod | grep nvidia",
            fix=installs.driver_install_text(m, None, o.today)
            + "\nIf it is installed: `sudo modprobe nvidia`; check `dmesg | grep -i nvidia` for "
            "Secure Boot or nouveau conflicts.",
        )
    if (
        driver_missing
        and devices is None
        and ("no nvidia driver" in lowered or "couldn't communicate" in lowered)
    ):
        # collect_env pastes: torch says it found no driver, but nothing shows whether a GPU exists.
        return c.warn(
            "no NVIDIA driver answers; if this machine has an NVIDIA GPU, its driver is not loaded",
            f"reported: {no_driver_text}",
            "check: lspci -nnk -d 10de: ; nvidia-smi",
            fix=installs.driver_install_text(m, None, o.today),
        )
    if d is not None and d.nvidia_pci_devices and d.nvidia_pci_devices_with_driver is not None:
        unbound = d.nvidia_pci_devices - d.nvidia_pci_devices_with_driver
        if unbound > 0 and not gpus:
            return c.fail(
                f"{unbound} of {d.nvidia_pci_devices} NVIDIA GPU(s) on the PCI bus have no NVIDIA driver",
                "check: lspci -nnk -d 10de:   (look for 'Kernel driver in use: nvidia')",
                fix=installs.driver_install_text(m, None, o.today),
            )
    if gpus:
        version = d.version if d and d.version else "unknown version"
        cuda_text = facts.driver_cuda_text(m)
        cuda = f", supports {cuda_text}" if cuda_text else ""
        return c.ok(f"{len(gpus)} NVIDIA GPU(s), driver {version}{cuda}")
    others = [g for g in m.gpus or () if not g.is_nvidia]
    if others and not facts.nvidia_gpu_count(m):
        return c.skip(f"no NVIDIA GPU here: {len(others)} {others[0].name} (see the rocm checks)")
    if facts.nvidia_gpu_count(m) == 0:
        return c.info(
            "No NVIDIA GPU on this machine: CPU-only",
            "no NVIDIA display or 3D controller on the PCI bus",
            "frameworks will run on the CPU; GPU checks are skipped",
        )
    return c.skip("GPU presence unknown in this snapshot")


@check(
    "driver.library_mismatch",
    "kernel module and user-space driver are the same version",
    cause="driver_library_mismatch",
)
def library_mismatch(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """The NVIDIA kernel module (`/proc/driver/nvidia/version`) and the user-space libraries
    (libnvidia-ml, libcuda) must be the same release. A package upgrade that replaces the
    libraries under a running module makes NVML fail with 'Driver/library version mismatch'
    and CUDA fail to initialise until the module is reloaded."""
    d = m.driver
    if d is None:
        return c.skip("driver state not in this snapshot")
    fix = (
        "sudo reboot   # or unload and reload: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset "
        "nvidia && sudo modprobe nvidia\nthen pin the driver packages: sudo apt-mark hold "
        "'nvidia-*' 'libnvidia-*'"
    )
    if d.nvml_error and "mismatch" in d.nvml_error.lower():
        return c.fail(
            "Driver/library version mismatch: the loaded kernel module differs from the libraries",
            f"NVML: {d.nvml_error}",
            *(["kernel module: " + d.kernel_module_version] if d.kernel_module_version else []),
            "check: cat /proc/driver/nvidia/version ; nvidia-smi",
            fix=fix,
        )
    if d.kernel_module_version and d.version:
        if d.kernel_module_version != d.version:
            return c.fail(
                f"kernel module {d.kernel_module_version} ≠ user-space driver {d.version}",
                "check: cat /proc/driver/nvidia/version ; nvidia-smi --query-gpu=driver_version --format=csv",
                fix=fix,
            )
        return c.ok(f"kernel module and libraries are both {d.version}")
    return c.skip("needs both the kernel module and the user-space driver version")


def _ran_anyway(c: Check, framework: str, result: CheckResult) -> CheckResult:
    """The table's verdict where the paste proves CUDA ran on this driver ('Is CUDA available:
    True'): a table minimum cannot overrule that (forward-compatibility packages, vendor
    drivers, WSL), so a failure becomes a warning that shows both."""
    if result.status is not Status.FAIL:
        return result
    return c.warn(
        f"{framework} ran CUDA on this driver although NVIDIA's table says it is too old: "
        + result.title,
        f"runtime: {framework.split()[0]}.cuda.is_available() was True",
        *result.evidence,
        fix="It works as it is; upgrade the driver when you can, since features beyond what "
        "this driver supports will fail:\n" + (result.fix or ""),
        cause=None,
    )


def _driver_vs_build(
    c: Check,
    m: Machine,
    o: DoctorOptions,
    framework: str,
    build_cuda: str,
    install_hint: str | None,
) -> CheckResult:
    d = m.driver
    assert d is not None
    windows = facts.driver_on_windows(m)
    requirement = cuda_knowledge.driver_requirement(build_cuda, windows=windows)
    driver_cuda = d.cuda_version or (
        cuda_knowledge.max_cuda_for_driver(d.version) if d.version and not windows else None
    )
    build = Version.parse(build_cuda)
    if build is None:
        return c.skip(f"cannot read {framework}'s CUDA version {build_cuda!r}")
    evidence = [f"{framework} is built for CUDA {build_cuda}"]
    cuda_text = facts.driver_cuda_text(m)
    if d.version:
        evidence.append(f"driver {d.version}" + (f" supports {cuda_text}" if cuda_text else ""))
    elif cuda_text:
        evidence.append(f"driver supports {cuda_text}")
    evidence.append("check: nvidia-smi   (top right: 'CUDA Version')")
    version = Version.parse(d.version) if d.version else None
    needs = (
        f"driver ≥ {requirement.full_support}" if requirement else f"a driver for CUDA {build_cuda}"
    )
    fix_lines = [
        installs.driver_install_text(m, requirement.full_support if requirement else None, o.today)
    ]
    if install_hint:
        fix_lines.append(f"Or keep the driver and install a build it supports: {install_hint}")
    fix = "\n".join(fix_lines)
    # Decide from the driver's own version when we know it; else from the CUDA it reports.
    if version is not None and requirement is not None:
        if version >= requirement.full_support:
            return c.ok(
                f"driver {d.version} supports {framework}'s CUDA {build_cuda}", *evidence[:-1]
            )
        floor = requirement.minor_compat_floor
        if floor is not None and version >= floor:
            return c.info(
                f"driver {d.version} runs {framework}'s CUDA {build_cuda} only through minor-version "
                f"compatibility (full support from {requirement.full_support})",
                *evidence,
                "minor-version compatibility: kernels shipped as PTX for a newer CUDA cannot be "
                "JIT-compiled and some features are missing",
                fix=fix,
            )
        return c.fail(
            f"driver {d.version} is too old for {framework} built with CUDA {build_cuda} (needs {needs})",
            *evidence,
            fix=fix,
        )
    if driver_cuda is not None:
        supported = Version.parse(driver_cuda)
        if supported is not None and supported.truncated(2) >= build.truncated(2):
            return c.ok(
                f"driver supports CUDA {driver_cuda} ≥ {framework}'s {build_cuda}", *evidence[:-1]
            )
        if supported is not None and supported.major == build.major and supported.major >= 11:
            return c.info(
                f"driver supports CUDA {driver_cuda}, older than {framework}'s {build_cuda}: runs "
                "through minor-version compatibility only",
                *evidence,
                fix=fix,
            )
        return c.fail(
            f"driver supports CUDA {driver_cuda} only; {framework} is built for CUDA {build_cuda}",
            *evidence,
            fix=fix,
        )
    return c.skip(f"driver version unknown; {framework} is built for CUDA {build_cuda}")


@check("driver.torch_cuda", "driver is new enough for torch's CUDA", cause="driver_too_old")
def torch_cuda(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Every CUDA runtime needs a minimum driver (NVIDIA's 'CUDA Toolkit and Corresponding
    Driver Versions' table). A torch wheel built for CUDA 12.4 needs driver ≥ 550.54.14 for full
    support; since CUDA 11.1, drivers of the same CUDA major can still run it through minor-version
    compatibility, with limits. Across majors nothing works: torch fails with 'The NVIDIA driver on
    your system is too old (found version 11040)'."""
    info = facts.torch(m)
    build = facts.torch_cuda(m)
    if info is None:
        return c.skip(facts.absent(m, "torch"))
    if build is None:
        return c.skip("torch is not a CUDA build")
    if m.driver is None or (m.driver.version is None and m.driver.cuda_version is None):
        if facts.has_nvidia_gpu(m) is False:
            return c.skip("no NVIDIA GPU")
        return c.skip("driver version not in this snapshot")
    # Keep the driver: the resolver's build of this torch release (or the nearest one) that
    # runs on it, if any does.
    answer = resolve(installs.request_for(m, today=o.today))
    hint = (
        answer.install.pip_command(force_reinstall=True) if answer.ok and answer.install else None
    )
    framework = f"torch {info.version}"
    result = _driver_vs_build(c, m, o, framework, build, hint)
    return _ran_anyway(c, framework, result) if info.cuda_available is True else result


@check(
    "driver.tensorflow_cuda", "driver is new enough for TensorFlow's CUDA", cause="driver_too_old"
)
def tensorflow_cuda(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """TensorFlow's GPU wheels are built for one CUDA release (tf.sysconfig.get_build_info());
    the driver must support it, by the same rule as for torch."""
    tf = m.frameworks.tensorflow if m.frameworks else None
    if tf is None:
        return c.skip(facts.absent(m, "TensorFlow"))
    if not tf.build or not tf.build.startswith("cuda-"):
        return c.skip("TensorFlow is not a CUDA build")
    if m.driver is None or (m.driver.version is None and m.driver.cuda_version is None):
        return c.skip("driver version not in this snapshot")
    return _driver_vs_build(
        c, m, o, f"TensorFlow {tf.version}", tf.build.removeprefix("cuda-"), None
    )


@check("driver.branch_eol", "driver branch is still supported")
def branch_eol(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """NVIDIA supports each datacenter driver branch for a fixed time (long-term branches about
    three years, production branches one year); new feature branches get no support period.
    Past end of life there are no more security or bug fixes. Branches come from NVIDIA's
    'supported drivers and CUDA toolkit versions' page, which also says that every earlier
    branch it no longer lists is end of life. The fix never names a branch the GPUs cannot take
    (Kepler ends at R470, Maxwell to Volta at R580)."""
    d = m.driver
    if d is None or not d.version:
        return c.skip("driver version not in this snapshot")
    windows = facts.driver_on_windows(m)
    branch = driver_knowledge.lookup(d.version, windows)
    name = driver_knowledge.branch_of(d.version, windows) or d.version
    major = branch.major if branch else int(name.lstrip("R") or 0)
    if branch is None:
        return _unlisted_branch(c, m, o, name, major)
    fix = installs.newer_branch_text(m, major, o.today)
    kind = driver_knowledge.DESIGNATION_NAMES.get(branch.designation or "", "branch")
    if branch.eol_without_date:
        return c.warn(
            f"driver branch {name} is past end of life",
            f"driver {d.version}",
            branch.source,
            fix=fix,
        )
    if branch.end_of_life is not None and branch.end_of_life <= o.today:
        return c.warn(
            f"driver branch {name} ({branch.designation or 'branch'}) reached end of life in "
            f"{branch.end_of_life:%Y-%m}",
            f"driver {d.version}: {kind}, end of life {branch.end_of_life:%Y-%m}",
            fix=fix,
        )
    if branch.designation == "NFB" and branch.end_of_life is None:
        return c.warn(
            f"driver branch {name} is a new feature branch: NVIDIA gives it no support period",
            f"driver {d.version}: new feature branches are for evaluating features; bug and "
            "security fixes go to production and long-term branches",
            fix=fix,
        )
    if branch.end_of_life is not None:
        return c.ok(
            f"driver branch {name} ({branch.designation}) supported until {branch.end_of_life:%Y-%m}"
        )
    return c.info(f"driver branch {name}: end of life not published")


def _unlisted_branch(c: Check, m: Machine, o: DoctorOptions, name: str, major: int) -> CheckResult:
    """A branch the table lacks: end of life when older than every supported one (NVIDIA's
    own rule), otherwise too new or not a datacenter branch."""
    d = m.driver
    assert d is not None and d.version
    supported = driver_knowledge.supported(o.today)
    if supported and major < supported[0].major:
        oldest = supported[0]
        return c.warn(
            f"driver {d.version} is past end of life: older than every branch NVIDIA still "
            f"supports (the oldest is {oldest.branch}, until {oldest.end_of_life:%Y-%m})",
            f"driver {d.version} (branch {name})",
            driver_knowledge.UNLISTED_ARE_EOL_SOURCE,
            fix=installs.newer_branch_text(m, major, o.today),
        )
    known = max((b.major for b in driver_knowledge.branches().values()), default=0)
    if major > known:
        return c.info(f"driver {d.version}: branch {name} is newer than dlrig's branch table")
    return c.info(
        f"driver {d.version}: branch {name} is not in NVIDIA's datacenter branch table",
        "GeForce/new-feature branches are not tracked there; check NVIDIA's driver page",
    )


@check("driver.persistence_mode", "persistence mode is on")
def persistence_mode(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Without persistence mode the driver tears the GPU state down whenever no process holds
    it, so every job start pays seconds of re-initialisation and tools like nvidia-smi wake the
    GPU. NVIDIA recommends nvidia-persistenced on Linux compute servers."""
    if not m.gpus:
        return c.skip("no GPUs in this snapshot")
    off = [g for g in m.gpus if g.persistence_mode is False]
    known = [g for g in m.gpus if g.persistence_mode is not None]
    if not known:
        return c.skip("persistence mode not in this snapshot")
    if off:
        return c.warn(
            f"persistence mode is off on {len(off)} of {len(m.gpus)} GPU(s)",
            *(f"{facts.gpu_label(g)}: persistence mode off" for g in off),
            "check: nvidia-smi --query-gpu=index,persistence_mode --format=csv",
            fix="sudo systemctl enable --now nvidia-persistenced   # or: sudo nvidia-smi -pm 1",
            cause=None,
        )
    return c.ok("persistence mode is on for every GPU")

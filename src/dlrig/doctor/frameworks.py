"""Framework checks: is torch a CUDA build, do its companions match, is it installed once."""

from __future__ import annotations

import re

from dlrig.doctor import facts, installs
from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.knowledge import pytorch as torch_knowledge
from dlrig.knowledge.resolver import resolve
from dlrig.knowledge.versions import (
    Version,
    build_variant,
    is_published_release,
    local_variant,
    minor_of,
)
from dlrig.machine.model import Machine, PackageInfo
from dlrig.report import CheckResult


@check("frameworks.torch_installed", "PyTorch is installed")
def torch_installed(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Which PyTorch the inspected Python environment imports. dlrig reads it from files
    (torch/version.py, package metadata), without importing torch, so a broken install is still
    described. Use `--python PATH` to inspect another environment than dlrig's own."""
    if m.frameworks is None:
        return c.skip("frameworks not in this snapshot")
    info = m.frameworks.torch
    where = m.frameworks.python_executable or "this Python"
    if info is None:
        return c.info(
            f"torch is not installed in {where}",
            fix="Install it (https://pytorch.org/get-started/locally/), or point dlrig at your "
            "training environment: dlrig doctor --python /path/to/venv/bin/python",
        )
    build = facts.torch_cuda(m)
    flavour = (
        f"CUDA {build}"
        if build
        else ("ROCm " + info.hip_version if info.hip_version else "CPU-only")
    )
    extra = [
        f"{label} {value}"
        for label, value in (
            ("cuDNN", info.cudnn_version),
            ("NCCL", info.nccl_version),
            ("at", info.location),
        )
        if value
    ]
    return c.ok(f"torch {info.version} ({flavour})", *extra)


@check("frameworks.cpu_only_torch", "torch can use the NVIDIA GPUs", cause="cpu_only_torch")
def cpu_only_torch(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """A torch wheel built without CUDA ('+cpu', torch.version.cuda is None) cannot use GPUs
    even when the driver works. pip picks it from a cache, from PyPI on some platforms, or
    because a requirements file pins it; conda picks it when 'cpuonly' gets installed."""
    info = facts.torch(m)
    if info is None:
        return c.skip(facts.absent(m, "torch"))
    cpu_only = facts.torch_is_cpu_only(info)
    has_gpu = facts.has_nvidia_gpu(m)
    reasons, proven = facts.gpu_expected(m)
    # A GPU proven absent (a live probe, the PCI bus) outweighs a CUDA install that suggests one.
    if cpu_only and reasons and has_gpu is not False and not facts.is_macos(m):
        answer = resolve(installs.request_for(m, today=o.today, need_cuda=True))
        what = "this machine has NVIDIA GPUs" if proven else "this environment is set up for CUDA"
        return c.fail(
            f"torch {info.version} is a CPU-only build, but {what}",
            f"torch {info.version}: no CUDA (torch.version.cuda is None)",
            *reasons,
            'check: python -c "import torch; print(torch.__version__, torch.version.cuda)"',
            fix=installs.reinstall_fix(answer),
        )
    if cpu_only and has_gpu is False and reasons:
        # A CUDA toolkit or CUDA packages without a GPU: the verdict stands, the reason differs.
        return c.ok(
            f"torch {info.version} is CPU-only, which fits this machine: it has no NVIDIA GPU "
            f"(though {'; '.join(reasons)})",
            "no NVIDIA GPU found (NVML / nvidia-smi / the PCI bus)",
        )
    if cpu_only and (has_gpu is False or not reasons):
        return c.ok(
            f"torch {info.version} is CPU-only, which fits this machine (no NVIDIA GPU or CUDA "
            "install recorded)"
        )
    if cpu_only is False:
        return c.ok(f"torch {info.version} is a GPU build")
    return c.skip("cannot tell whether torch is a CUDA build")


@check("frameworks.torch_cuda_usable", "torch reports CUDA available")
def torch_cuda_usable(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """`torch.cuda.is_available()` as recorded (collect_env's 'Is CUDA available'). dlrig never
    calls it itself: it would initialise CUDA. False on a GPU machine with a CUDA build means
    the driver, the build or the visible devices are wrong; the other checks say which."""
    info = facts.torch(m)
    if info is None or info.cuda_available is None:
        return c.skip("not recorded (dlrig does not initialise CUDA to find out)")
    if info.cuda_available:
        return c.ok("torch.cuda.is_available() was True")
    if facts.torch_cuda(m) and facts.has_nvidia_gpu(m):
        return c.fail(
            "torch.cuda.is_available() was False on a machine with NVIDIA GPUs and a CUDA build of torch",
            "see driver.torch_cuda, driver.loaded and cuda.visible_devices for the reason",
            fix="Fix the failing driver check above; check CUDA_VISIBLE_DEVICES; run "
            '`python -c "import torch; torch.cuda.init()"` to see CUDA\'s own error.',
            cause=None,
        )
    return c.info("torch.cuda.is_available() was False (no GPU or CPU build)")


# conda's build strings name the variant: torchvision 'py37_cu101', torchaudio 'py38_cpu'.
_CONDA_BUILD_VARIANT = re.compile(r"(?:^|_)(cpu|cu(\d+)(\d))(?:_|$)")


def _conda_variant(companion: PackageInfo) -> str | None:
    """'cpu' or 'cuda 10.1' from a pytorch-channel conda build string, else None."""
    if companion.installer != "conda" or not companion.build:
        return None
    match = _CONDA_BUILD_VARIANT.search(companion.build.split()[0])
    if not match:
        return None
    return "cpu" if match.group(1) == "cpu" else f"cuda {match.group(2)}.{match.group(3)}"


_SOURCE_LOCAL = re.compile(r"(?:git)?[0-9a-f]{7,40}")


def _source_build(version: str) -> bool:
    """Built from a checkout: an alpha pre-release ("2.8.0a0", as setup.py writes it) or a local
    part that is a commit ("+gitd0c8b1f", "+d801a34"); not a nightly (".dev2024...")."""
    public, _, local = version.partition("+")
    if ".dev" in public:
        return False
    return bool(re.search(r"\da\d+$", public)) or bool(_SOURCE_LOCAL.fullmatch(local))


def _companion_problem(m: Machine, companion: PackageInfo, torch_version: str) -> str | None:
    """Why a torchvision/torchaudio does not fit this torch, or None."""
    parsed = Version.parse(companion.version)
    if companion.name == "torchvision" and parsed is not None and parsed < Version((0, 3)):
        # torchvision before 0.3 (2019) was pure Python: no compiled operator ties it to a torch
        # build ("torchvision now contains custom C++ / CUDA operators", 0.3.0's release notes)
        return None
    if not is_published_release(torch_version) and is_published_release(companion.version):
        # Published companion wheels link against a published torch; a source build, a nightly
        # or a vendor's fork (NVIDIA Jetson, NGC) has other symbols ("undefined symbol").
        return (
            f"{companion.name} {companion.version} is a published wheel built against a released "
            f"torch, but torch {torch_version} is a source, nightly or vendor build"
        )
    if companion.name == "torchvision":
        expected_torch = torch_knowledge.torch_for_torchvision(companion.version)
    else:
        expected_torch = torch_knowledge.torch_for_torchaudio(companion.version)
    torch_minor = minor_of(torch_version)
    # Two source builds ("2.11.0+gitd0c8b1f" with "0.24.1+d801a34", "2.8.0a0+gitfc14c65" with
    # "0.24.0a0+c85f008") pair by the torch present when the companion was compiled, which its
    # version number does not say: the release pairing is no evidence there. Nightlies (.dev)
    # and vendors' release wheels ("+rocm6.4.1.git...") keep the pairing.
    unpaired = _source_build(torch_version) and _source_build(companion.version)
    if expected_torch is not None and expected_torch != torch_minor and not unpaired:
        # torchaudio 2.11 is built on the stable ABI and supports every later torch.
        later = (Version.parse(torch_minor) or Version((0,))) >= Version((2, 11))
        if not (companion.name == "torchaudio" and expected_torch == "2.11" and later):
            return (
                f"{companion.name} {companion.version} is built for torch {expected_torch}, "
                f"not {torch_minor}"
            )
    torch_variant = build_variant(torch_version)
    variant = build_variant(companion.version)
    if torch_variant and variant and torch_variant != variant:
        return (
            f"{companion.name} {companion.version} is a {variant} build, torch is {torch_variant}"
        )
    build_cuda = facts.torch_cuda(m)
    conda_variant = _conda_variant(companion)
    info = facts.torch(m)
    cpu_only = facts.torch_is_cpu_only(info) if info else None
    torch_side = "cpu" if cpu_only else (f"cuda {minor_of(build_cuda)}" if build_cuda else None)
    if conda_variant is not None and torch_side is not None and conda_variant != torch_side:
        return (
            f"{companion.name} {companion.version} is conda's {conda_variant} build "
            f"({companion.build}), torch is a {torch_side} build"
        )
    if companion.build and companion.build.startswith("cuda-") and build_cuda:
        companion_cuda = companion.build.removeprefix("cuda-")
        if minor_of(companion_cuda) != minor_of(build_cuda):
            return (
                f"{companion.name} is built for CUDA {companion_cuda}, torch for CUDA {build_cuda}"
            )
    return None


@check(
    "frameworks.companions",
    "torchvision and torchaudio match torch",
    cause="version_mismatch_torch_torchvision",
)
def companions(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """torchvision and torchaudio carry compiled operators linked against one torch release and
    one CUDA variant (torchvision 0.20 ↔ torch 2.5; '+cu121' ↔ '+cu121'). A mismatch fails at
    import or at the first custom op ('operator torchvision::nms does not exist')."""
    info = facts.torch(m)
    if info is None or m.frameworks is None:
        return c.skip(facts.absent(m, "torch"))
    present = [p for p in (m.frameworks.torchvision, m.frameworks.torchaudio) if p is not None]
    if not present:
        return c.skip("neither torchvision nor torchaudio is installed")
    problems = [
        p for p in (_companion_problem(m, companion, info.version) for companion in present) if p
    ]
    if problems:
        evidence = (f"torch {info.version}", *(f"{p.name} {p.version}" for p in present))
        if not is_published_release(info.version):
            return c.fail(
                problems[0],
                *problems[1:],
                *evidence,
                fix="Build the companions from source against this torch (check out the "
                "torchvision/torchaudio tag that pairs with its release and run `pip install "
                "--no-build-isolation .`), or install the wheels its vendor publishes for it "
                "(NVIDIA Jetson / NGC images ship matching ones).",
            )
        # Keep torch as it is (release and variant) and bring the companions to it, from the
        # one index that holds all three.
        answer = resolve(
            installs.request_for(
                m, exact=True, variant=installs.installed_variant(m), today=o.today
            )
        )
        if answer.install is None:
            answer = resolve(installs.request_for(m, exact=True, today=o.today))
        return c.fail(problems[0], *problems[1:], *evidence, fix=installs.reinstall_fix(answer))
    return c.ok(
        "torchvision/torchaudio match torch " + info.version,
        *(f"{p.name} {p.version}" for p in present),
    )


@check("frameworks.duplicate_torch", "torch is installed once", cause="duplicate_torch_installs")
def duplicate_torch(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Two importable copies of torch (pip and conda in one environment, or a user-site copy
    under ~/.local) mean the version you installed may not be the one that runs, and extensions
    built against one crash with 'undefined symbol' against the other."""
    if m.frameworks is None:
        return c.skip("frameworks not in this snapshot")
    duplicates = [d for d in m.frameworks.duplicates if d.name in {"torch", "pytorch"}]
    if duplicates:
        d = duplicates[0]
        return c.fail(
            f"torch is installed {len(d.locations)} times: {', '.join(d.versions)}",
            *d.locations,
            "check: pip list 2>/dev/null | grep -i torch ; conda list | grep -i torch ; "
            'python -c "import torch; print(torch.__file__)"',
            fix="pip uninstall -y torch   # repeat until pip says it is not installed\n"
            "conda remove --force pytorch   # if conda installed one\n"
            "rm -rf ~/.local/lib/python3*/site-packages/torch*   # a user-site copy\n"
            "then install once from https://pytorch.org/get-started/locally/",
        )
    return c.ok("one torch install")


@check("frameworks.duplicate_packages", "no package installed twice")
def duplicate_packages(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Other packages installed twice in one environment (numpy, triton, nvidia-* CUDA
    libraries) shadow each other the same way torch does."""
    if m.frameworks is None:
        return c.skip("frameworks not in this snapshot")
    others = [d for d in m.frameworks.duplicates if d.name not in {"torch", "pytorch"}]
    if others:
        return c.warn(
            f"{len(others)} package(s) installed more than once",
            *(f"{d.name}: {', '.join(d.versions)} in {', '.join(d.locations)}" for d in others),
            fix="pip uninstall the copy you do not want (see `pip list -v` for locations).",
            cause=None,
        )
    return c.ok("no duplicate packages")


@check("frameworks.tensorflow_gpu", "TensorFlow can use the GPUs")
def tensorflow_gpu(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """TensorFlow on Linux needs its CUDA build (`pip install tensorflow[and-cuda]`); the
    tensorflow-cpu package and builds without CUDA run on the CPU only."""
    tf = m.frameworks.tensorflow if m.frameworks else None
    if tf is None:
        return c.skip(facts.absent(m, "TensorFlow"))
    if tf.build == "cpu" and facts.has_nvidia_gpu(m):
        return c.warn(
            f"{tf.name} {tf.version} is a CPU-only build on a machine with NVIDIA GPUs",
            fix="pip install 'tensorflow[and-cuda]'",
            cause=None,
        )
    return c.ok(f"{tf.name} {tf.version}" + (f" ({tf.build})" if tf.build else ""))


@check("frameworks.jax_gpu", "JAX can use the GPUs")
def jax_gpu(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """JAX needs a CUDA plugin (`pip install "jax[cuda12]"` or `jax[cuda13]`) to use NVIDIA
    GPUs; plain `pip install jax` runs on the CPU."""
    fw = m.frameworks
    if fw is None or fw.jax is None:
        return c.skip(facts.absent(m, "JAX"))
    jaxlib_variant = local_variant(fw.jaxlib.version) if fw.jaxlib else None
    if (
        fw.jax_cuda_plugin is None
        and not (jaxlib_variant and "cuda" in jaxlib_variant)
        and facts.has_nvidia_gpu(m)
    ):
        return c.warn(
            f"jax {fw.jax.version} has no CUDA plugin on a machine with NVIDIA GPUs",
            fix='pip install -U "jax[cuda12]"',
            cause=None,
        )
    return c.ok(
        f"jax {fw.jax.version}" + (f" with {fw.jax_cuda_plugin.name}" if fw.jax_cuda_plugin else "")
    )

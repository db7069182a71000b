"""The software stack a machine gets: every package choice comes from the resolver
(`dlrig.knowledge.resolver`) and the provision tables, never from a formula here.

- torch, torchvision, torchaudio, the CUDA wheel variant and its index: `resolver.resolve`;
- the driver branch: the resolver's branch rule (`install_commands.branch_for`: a supported
  long-term branch at or above the minimum the stack needs), capped by the newest branch that
  still supports the GPU architecture (`provision_driver_policy.csv`);
- open or proprietary kernel modules: `provision_driver_policy.csv`;
- the CUDA toolkit's own driver minimum: NVIDIA's Table 3 (`cuda_driver_minimum.csv`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from dlrig.errors import InputError
from dlrig.knowledge import cuda as cuda_knowledge
from dlrig.knowledge import pytorch, rocm
from dlrig.knowledge import pytorch as torch_tables
from dlrig.knowledge.install_commands import branch_for
from dlrig.knowledge.provision import driver_policies, torch_python
from dlrig.knowledge.resolver import Request, resolve
from dlrig.knowledge.tables import rows
from dlrig.knowledge.versions import Version, local_variant, minor_of
from dlrig.provision.model import Decision, Facts


@dataclass(frozen=True)
class DriverChoice:
    branch: str  # "580"
    kernel_modules: str  # open | proprietary
    min_version: str | None  # the lowest driver the stack runs on
    decisions: tuple[Decision, ...]


@dataclass(frozen=True)
class TorchChoice:
    torch_minor: str
    requirements: tuple[str, ...]  # ("torch==2.9.*", "torchvision==0.24.*", ...)
    cuda_variant: str  # "cu128" | "cpu"
    cuda_version: str | None
    index_url: str | None
    pip_option: str | None  # --index-url | --extra-index-url | -f
    pip_source: str | None  # the URL pip is pointed at
    min_driver: str | None
    python: str  # the Python the environment gets
    decisions: tuple[Decision, ...]


def _today() -> dt.date:
    return dt.datetime.now(dt.UTC).date()


def wheel_variant_for_cuda(facts: Facts, cuda_variant: str | None) -> str | None:
    """The wheel variant a stated --cuda asks for in an environment or image ("12.8" -> cu128).

    Only a *stated* --cuda counts: a snapshot's nvcc is the host toolkit, which torch wheels do
    not use (they bring their own CUDA runtime). A combination no wheel exists for is refused.
    """
    if "cuda" not in facts.stated or not facts.cuda:
        return cuda_variant
    wanted = Version.parse(facts.cuda)
    assert wanted is not None  # checked by facts.check_stated
    asked = f"cu{wanted.major}{wanted.minor}"
    for named, how in ((cuda_variant, "--cuda-variant"), (local_variant(facts.torch), "--torch")):
        if named and named != asked:
            raise InputError(
                f"--cuda {facts.cuda} and {how} {named} disagree: a wheel is built for one CUDA",
                fix=f"give one of them (--cuda {facts.cuda} means the {asked} wheels)",
            )
    if facts.torch:
        shipped = pytorch.variants_of(facts.torch)
        for variant in shipped:
            have = Version.parse(variant.cuda_version)
            if have is not None and have.truncated(2) == wanted.truncated(2):
                return variant.cuda_variant
        names = ", ".join(v.cuda_variant for v in shipped) or "no CUDA wheels"
        raise InputError(
            f"--torch {facts.torch} --cuda {facts.cuda}: torch {minor_of(facts.torch)} has no "
            f"CUDA {wanted.major}.{wanted.minor} wheel (it ships {names})",
            fix="drop --cuda to let dlrig choose, or pick a torch release built for that CUDA",
        )
    return asked


def torch_choice(
    facts: Facts, cuda_variant: str | None = None, prefer_python: tuple[str, ...] = ()
) -> TorchChoice:
    """torch + companions + index for these facts, from the resolver."""
    capabilities = (facts.compute_capability,) if facts.compute_capability else ()
    # "1.12.0+cu116" (as the seeds write it) names the wheel variant too.
    cuda_variant = cuda_variant or local_variant(facts.torch)
    request = Request(
        compute_capabilities=capabilities,
        driver_version=facts.driver_version,
        torch_version=facts.torch,
        torch_exact=facts.torch is not None,
        cuda_variant=cuda_variant,
        # Provisioning sets a GPU machine up: a CUDA wheel even when no GPU is named.
        need_cuda=cuda_variant != "cpu",
    )
    answer = resolve(request)
    install = answer.install
    if install is None:
        raise InputError(
            "no published PyTorch wheel fits: " + "; ".join(answer.problems or ("unknown",)),
            fix="state another --torch, or check the GPU with --gpu",
        )
    decisions = [
        Decision(
            "torch",
            " ".join(install.requirements()),
            "; ".join(answer.reasons) or "resolver's choice",
            "; ".join(install.sources[:2]) or None,
        ),
        Decision(
            "wheel index",
            f"{install.pip_option} {install.source_url}" if install.source_url else "PyPI",
            f"torch {install.torch_minor} {install.cuda_variant} wheels live there",
            install.sources[-1] if install.sources else None,
        ),
    ]
    if answer.driver_upgrade is not None:
        decisions.append(
            Decision("driver", answer.driver_upgrade.min_version, answer.driver_upgrade.text())
        )
    python, python_decision = python_for(
        install.torch_minor, facts.python, facts.python_from, prefer_python
    )
    decisions.append(python_decision)
    return TorchChoice(
        torch_minor=install.torch_minor,
        requirements=install.requirements(),
        cuda_variant=install.cuda_variant,
        cuda_version=install.cuda_version,
        index_url=install.index_url,
        pip_option=install.pip_option,
        pip_source=install.source_url,
        min_driver=install.min_driver,
        python=python,
        decisions=tuple(decisions),
    )


def rocm_choice(facts: Facts, variant: str, prefer_python: tuple[str, ...] = ()) -> TorchChoice:
    """torch from a ROCm wheel index (`--cuda-variant rocm6.2`): the newest release that shipped
    the variant (or the stated --torch), its companions, and no NVIDIA driver floor."""
    # Only a stated --torch binds: a probed one is what the machine has now, not what it wants.
    stated = facts.torch if "torch" in facts.stated else None
    try:
        build = rocm.choose_build(variant, stated)
    except LookupError as exc:
        raise InputError(
            f"--cuda-variant {variant}: {exc}", fix="give a ROCm variant the release shipped"
        ) from None
    minor = build.torch_version
    companion = torch_tables.companions().get(minor)
    requirements = [f"torch=={minor}.*"]
    if companion is not None and companion.torchvision_version:
        requirements.append(f"torchvision=={companion.torchvision_version}.*")
    if companion is not None and companion.torchaudio_version:
        requirements.append(f"torchaudio=={companion.torchaudio_version}.*")
    index = f"https://download.pytorch.org/whl/{variant}"
    python, python_decision = python_for(minor, facts.python, facts.python_from, prefer_python)
    decision = Decision(
        "torch",
        f"torch {minor} {variant}",
        f"the newest release with a {variant} wheel (ROCm {build.rocm_version})"
        if stated is None
        else f"torch {minor} shipped {variant}",
        build.source,
    )
    return TorchChoice(
        torch_minor=minor,
        requirements=tuple(requirements),
        cuda_variant=variant,
        cuda_version=None,
        index_url=index,
        pip_option="--index-url",
        pip_source=index,
        min_driver=None,
        python=python,
        decisions=(decision, python_decision),
    )


def _newest_torch_for_python(python: Version) -> str | None:
    fitting = [
        row["torch_version"]
        for row in rows("provision_torch_python")
        if (Version.parse(row["python_min"]) or python)
        <= python
        <= (Version.parse(row["python_max"]) or python)
    ]
    return max(fitting, key=lambda m: Version.parse(m) or Version((0,))) if fitting else None


def python_for(
    torch_minor: str,
    wanted: str | None,
    wanted_from: str | None = "stated",
    prefer: tuple[str, ...] = (),
) -> tuple[str, Decision]:
    """The Python of the new environment: a stated --python must fit the release; the
    snapshot's own interpreter is only a preference (the environment is a new one)."""
    span = torch_python(torch_minor)
    if span is None:
        chosen = minor_of(wanted) or "3.11"
        return chosen, Decision(
            "python", chosen, f"no Python range recorded for torch {torch_minor}"
        )
    low, high, source = span
    floor, top = Version.parse(low) or Version((3,)), Version.parse(high) or Version((3, 99))
    if wanted:
        chosen = minor_of(wanted) or wanted
        version = Version.parse(chosen)
        fits = version is not None and floor <= version.truncated(2) <= top
        if fits:
            return chosen, Decision(
                "python",
                chosen,
                f"from {wanted_from or 'the facts'}; torch {torch_minor} supports {low}-{high}",
                source,
            )
        if wanted_from == "stated":
            other = _newest_torch_for_python(version) if version is not None else None
            fix = f"use --python {low}..{high} for torch {torch_minor}"
            if other and other != torch_minor:
                fix += f", or --torch {other} (the newest release with Python {chosen} wheels)"
            raise InputError(
                f"--python {wanted}: torch {torch_minor} has wheels for Python {low} to {high} only",
                fix=fix,
            )
        # The snapshot's interpreter does not fit: the new environment gets one that does.
        note = f"{wanted_from or 'the facts'} has Python {wanted}, which torch {torch_minor} has no wheels for"
    else:
        note = ""
    # From `prefer` (the Pythons a base image ships) the newest that fits; otherwise the newest
    # the release supports but not past 3.12: the newest Pythons lag in other packages' wheels.
    fitting = [c for c in prefer if floor <= (Version.parse(c) or floor) <= top]
    if prefer and not fitting:
        raise InputError(
            f"torch {torch_minor} has wheels for Python {low}-{high}; none of {', '.join(prefer)} fits",
            fix="state another --torch",
        )
    if fitting:
        text = max(fitting, key=lambda c: Version.parse(c) or floor)
    else:
        newest = min(top, Version((3, 12)))
        text = low if floor > newest else f"{newest.major}.{newest.minor}"
    why = f"torch {torch_minor} has wheels for Python {low}-{high}"
    if note:
        why = f"{note}; the new environment gets {text} ({why})"
    return text, Decision("python", text, why, source)


def driver_choice(
    facts: Facts, needs_cuda: tuple[str, ...] = (), needs_driver: tuple[str, ...] = ()
) -> DriverChoice:
    """The driver branch and kernel-module flavour for the GPUs and the CUDA releases wanted."""
    decisions: list[Decision] = []
    minimum = Version((0,))
    for cuda in needs_cuda:
        requirement = cuda_knowledge.driver_requirement(cuda)
        if requirement is None:
            raise InputError(
                f"--cuda {cuda}: not a CUDA release in the tables", fix="give e.g. --cuda 12.8"
            )
        decisions.append(
            Decision(
                f"driver for CUDA {requirement.cuda}",
                f">= {requirement.full_support}",
                "NVIDIA's minimum for the toolkit (Table 3)",
                requirement.full_support_source,
            )
        )
        minimum = max(minimum, requirement.full_support)
    for text in needs_driver:
        version = Version.parse(text)
        if version is not None:
            minimum = max(minimum, version)
    policy = driver_policies().get(facts.architecture or "")
    if facts.architecture and policy is None:
        raise InputError(
            f"{facts.gpu_name or 'the GPU'}: architecture {facts.architecture} has no driver policy",
            fix="give an NVIDIA data-centre or GeForce GPU of Maxwell or newer with --gpu",
        )
    if policy is None:
        raise InputError(
            "the GPU's architecture is not known, and the kernel modules depend on it (open for "
            "Turing and newer, proprietary for Maxwell to Volta)",
            fix="give the GPU model with --gpu MODEL (or --machine SNAPSHOT of the box)",
        )
    if policy.kernel_modules == "unsupported":
        raise InputError(
            f"{facts.gpu_name}: {facts.architecture} GPUs are not supported by any current driver branch",
            fix="this GPU needs a legacy driver (R470 or older), which dlrig does not provision",
        )
    branch = branch_for(minimum, _today())
    if branch is None:
        raise InputError(
            f"no supported driver branch reaches {minimum}", fix="use an older --cuda or --torch"
        )
    chosen = int(branch.branch.lstrip("R"))
    kind = f"{branch.branch} ({branch.designation or 'branch'}"
    kind += f", supported until {branch.end_of_life:%Y-%m})" if branch.end_of_life else ")"
    if minimum.parts != (0,):
        why = f"{kind} is the supported long-term branch at or above {minimum}, the stack's minimum"
    else:
        why = (
            f"{kind} is the supported long-term branch (no CUDA or torch stated: no other minimum)"
        )
    source = branch.source
    if policy.last_branch and chosen > int(policy.last_branch):
        cap = int(policy.last_branch)
        if minimum.major > cap:
            raise InputError(
                f"{facts.gpu_name}: {facts.architecture} GPUs end at driver branch R{cap}, but the "
                f"stack needs a driver >= {minimum}",
                fix="choose an older --cuda/--torch (a CUDA 12.x wheel) for this GPU",
            )
        chosen = cap
        why = f"R{cap} is the last branch that supports {facts.architecture} GPUs (newer: {branch.branch})"
        source = policy.source
    decisions.append(Decision("driver branch", f"R{chosen}", why, source))
    modules = "proprietary" if policy.kernel_modules == "proprietary" else "open"
    decisions.append(
        Decision(
            "kernel modules",
            modules,
            f"{facts.architecture}: {policy.kernel_modules}",
            policy.source,
        )
    )
    return DriverChoice(
        branch=str(chosen),
        kernel_modules=modules,
        min_version=str(minimum) if minimum.parts != (0,) else None,
        decisions=tuple(decisions),
    )


def toolkit_can_target(cuda: str, compute_capability: str) -> tuple[bool, str, str | None]:
    """(can nvcc of CUDA `cuda` build for this GPU, why, source), from cuda_arch_support.csv:
    a toolkit older than the architecture does not know it; CUDA 13 removed Maxwell to Volta."""
    wanted = Version.parse(cuda)
    assert wanted is not None
    first = cuda_knowledge.first_cuda_for(compute_capability)
    if first is not None and wanted.truncated(2) < first.truncated(2):
        return (
            False,
            f"sm_{compute_capability.replace('.', '')} first appears in CUDA {first}",
            None,
        )
    event = cuda_knowledge.arch_status(cuda, compute_capability)
    if event is not None and event.event == "removed":
        return (
            False,
            f"CUDA {event.cuda_version} removed sm_{compute_capability.replace('.', '')} ({event.notes})",
            event.source,
        )
    return True, "", None


def check_toolkit(cuda: str, facts: Facts, offered: list[str], os_id: str) -> Decision | None:
    """Refuse a CUDA toolkit that cannot build for the GPU, naming the toolkits that can."""
    if not facts.compute_capability:
        return None
    fits, why, _ = toolkit_can_target(cuda, facts.compute_capability)
    if fits:
        return Decision(
            "toolkit and GPU",
            f"CUDA {cuda} targets sm_{facts.compute_capability.replace('.', '')}",
            "cuda_arch_support.csv: the architecture is neither newer than the toolkit nor removed from it",
        )
    usable = [m for m in offered if toolkit_can_target(m, facts.compute_capability)[0]]
    usable.sort(key=lambda m: Version.parse(m) or Version((0,)))
    gpu = facts.gpu_name or "the GPU"
    if usable:
        fix = f"use --cuda {usable[-1]} (the newest toolkit in NVIDIA's {os_id} repository that targets it)"
    else:
        fix = f"no toolkit in dlrig's table for {os_id} targets it: choose another --os"
    raise InputError(
        f"--cuda {cuda}: the toolkit cannot build for {gpu} (compute capability "
        f"{facts.compute_capability}): {why}",
        fix=fix,
    )

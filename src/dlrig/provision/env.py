"""`dlrig provision env`: a Python environment for the chosen torch.

- requirements-torch.txt: torch + torchvision + torchaudio and the wheel index, from the
  resolver (the only place that picks them);
- requirements.in: the other packages (`--with`), locked by a real resolver (`uv pip compile
  --generate-hashes`) into requirements.lock with `--lock`;
- environment.yml for conda; lock.sh to re-lock.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from dlrig.errors import DlrigError, InputError
from dlrig.provision import env_frameworks
from dlrig.provision.model import Bundle, Decision, Facts, GeneratedFile
from dlrig.provision.render import header, render
from dlrig.provision.stack import TorchChoice, rocm_choice, torch_choice, wheel_variant_for_cuda

_TORCH_NAMES = re.compile(r"^\s*(torch|torchvision|torchaudio)\s*([=<>!~\[;]|$)", re.I)
_REQUIREMENT = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?\s*([=<>!~]=?[^;\s]*(\s*,\s*[=<>!~]=?[^;\s]*)*)?$"
)


@dataclass(frozen=True)
class EnvOptions:
    packages: tuple[str, ...] = ()  # --with: other requirements ("numpy<2", "tqdm")
    name: str = "train"
    lock: bool = False  # run uv pip compile now (needs the package index)
    cuda_variant: str | None = None  # "cu118" | "cpu": a hard requirement for the resolver
    framework: Literal["torch", "tensorflow", "jax"] = "torch"
    framework_version: str | None = None  # a TensorFlow / JAX release to insist on
    timeout_s: float = 180.0


def _check_packages(packages: tuple[str, ...]) -> None:
    for package in packages:
        if _TORCH_NAMES.match(package):
            raise InputError(
                f"--with {package}: torch and its companions come from the resolver",
                fix="state the release with --torch instead",
            )
        if not _REQUIREMENT.match(package.strip()):
            raise InputError(
                f"--with {package}: not a requirement", fix="give e.g. --with 'numpy<2' --with tqdm"
            )


def uv_binary() -> str | None:
    try:
        from uv import find_uv_bin  # the `uv` wheel ships its binary

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==")
TORCH_FAMILY = frozenset({"torch", "torchvision", "torchaudio"})


def _entries(locked: str) -> list[tuple[str, list[str], set[str]]]:
    """(name, lines, dependents) per package of `uv pip compile` output ("# via" annotations)."""
    entries: list[tuple[str, list[str], set[str]]] = []
    in_via = False
    for line in locked.splitlines():
        match = _PIN.match(line)
        if match:
            entries.append((match.group(1).lower().replace("_", "-"), [line], set()))
            in_via = False
            continue
        if not entries:
            continue
        _, lines, via = entries[-1]
        lines.append(line)
        text = line.strip()
        if text.startswith("# via"):
            rest = text[len("# via") :].strip()
            in_via = not rest
            if rest:
                via.add(rest)
        elif in_via and text.startswith("#   "):
            via.add(text[4:].strip())
        elif in_via and text.startswith("#") and text[1:].strip():
            via.add(text[1:].strip())
    return entries


def without_torch_closure(locked: str) -> tuple[str, tuple[str, ...]]:
    """The lock minus torch and what only the torch install brings.

    requirements-torch.txt is installed first, from the PyTorch index: torch, its companions and
    every package they pull in (CUDA runtime wheels, triton, sympy, filelock...). The lock holds
    the rest, installed after it with --no-deps, so nothing the torch step installed is
    replaced by PyPI's build of it. A package asked for directly (--with) always stays.
    """
    entries = _entries(locked)
    dependents = {name: via for name, _, via in entries}
    excluded: set[str] = set()

    def torch_side(name: str, seen: frozenset[str] = frozenset()) -> bool:
        if name in TORCH_FAMILY:
            return True
        via = dependents.get(name, set())
        if any(v.startswith(("-r ", "-c ")) and "requirements.in" in v for v in via):
            return False  # asked for directly
        return any(
            torch_side(v.lower().replace("_", "-"), seen | {name})
            for v in via
            if not v.startswith("-") and v.lower() not in seen
        )

    kept = []
    for name, lines, _ in entries:
        if torch_side(name):
            excluded.add(name)
        else:
            kept.append("\n".join(lines))
    return ("\n".join(kept) + "\n" if kept else ""), tuple(sorted(excluded))


def compile_lock(
    requirements_in: str,
    python: str,
    timeout_s: float = 180.0,
    constraints: tuple[str, ...] = (),
    platform: str = "linux",
) -> str:
    """requirements.in text -> a hashed lock, by `uv pip compile` against the package index.

    `constraints` (the torch pins) keep the resolution consistent with the torch release the
    environment gets, so a --with package that needs torch resolves against the right one.
    """
    uv = uv_binary()
    if uv is None:
        raise DlrigError(
            "--lock needs uv, which is not installed",
            fix="pip install uv (or drop --lock and run ./lock.sh later)",
        )
    with tempfile.TemporaryDirectory(prefix="dlrig-lock-") as folder:
        source = Path(folder) / "requirements.in"
        source.write_text(requirements_in)
        argv = [
            uv,
            "pip",
            "compile",
            str(source),
            "--generate-hashes",
            "--python-version",
            python,
            "--python-platform",
            platform,
            "--quiet",
            "--no-progress",
            "--no-header",
        ]
        if constraints:
            pins = Path(folder) / "torch-constraints.txt"
            pins.write_text("\n".join(constraints) + "\n")
            argv += ["--constraint", str(pins)]
        env = dict(os.environ, UV_PYTHON_DOWNLOADS="never", NO_COLOR="1")
        try:
            result = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=folder
            )
        except subprocess.TimeoutExpired:
            raise DlrigError(
                f"uv pip compile did not finish in {timeout_s:g} s",
                fix="check the connection to the package index",
            ) from None
    if result.returncode != 0:
        message = (result.stderr.strip().splitlines() or ["failed"])[-1]
        raise DlrigError(
            f"uv pip compile failed: {message}",
            fix="fix the --with requirements, or check the package index",
        )
    return result.stdout


def files_for(
    facts: Facts, options: EnvOptions, choice: TorchChoice
) -> tuple[list[GeneratedFile], list[Decision]]:
    head = header(facts, "env")
    packages = tuple(p.strip() for p in options.packages)
    files = [
        GeneratedFile(
            "requirements-torch.txt",
            render("env/requirements-torch.txt.j2", header=head, torch=choice),
            "requirements",
            "torch and companions from the PyTorch index",
        ),
        GeneratedFile(
            "requirements.in",
            render("env/requirements.in.j2", header=head, packages=packages),
            "requirements",
            "other packages, unlocked",
        ),
        GeneratedFile(
            "environment.yml",
            render(
                "env/environment.yml.j2",
                header=head,
                name=options.name,
                torch=choice,
                packages=packages,
            ),
            "yaml",
            "conda environment",
        ),
        GeneratedFile(
            "lock.sh",
            render(
                "env/lock.sh.j2",
                header=head,
                relock=_relock_command(choice, packages, options.name),
            ),
            "shell",
            "re-lock requirements.in with uv",
            executable=True,
        ),
    ]
    decisions = list(choice.decisions)
    if options.lock:
        body = "\n".join(packages) + "\n"
        raw = compile_lock(body, choice.python, options.timeout_s, choice.requirements)
        locked, left_out = without_torch_closure(raw)
        note = (
            "# Locked by uv pip compile --generate-hashes from requirements.in, resolved against\n"
            f"# {' '.join(choice.requirements)} (requirements-torch.txt). Install requirements-torch.txt\n"
            "# FIRST, then this file with: pip install --no-deps --require-hashes -r requirements.lock\n"
        )
        if left_out:
            note += (
                "# Left out, because the torch install brings them from the PyTorch index: "
                + ", ".join(left_out)
                + "\n"
            )
        files.append(
            GeneratedFile(
                "requirements.lock",
                head + "\n" + note + locked,
                "requirements",
                "hashed lock of requirements.in",
            )
        )
        decisions.append(
            Decision(
                "lock",
                f"{locked.count('==')} pinned package(s) with hashes",
                f"uv pip compile for Python {choice.python}, linux, constrained to "
                f"{choice.requirements[0]}; {len(left_out)} package(s) the torch install brings "
                "are left out, so installing the lock after torch (--no-deps) swaps nothing",
            )
        )
    return files, decisions


def _relock_command(choice: TorchChoice, packages: tuple[str, ...], name: str) -> str:
    """The `dlrig provision env --lock` that reproduces this environment's lock: the torch
    release and wheel variant and the Python are given exactly, so the resolver chooses the same."""
    import shlex

    pinned = choice.requirements[0].split("==", 1)[-1].removesuffix(".*")  # "1.12.0" | "2.9"
    words = [
        "dlrig",
        "provision",
        "env",
        "--torch",
        f"{pinned}+{choice.cuda_variant}",
        "--python",
        choice.python,
        "--name",
        name,
    ]
    for package in packages:
        words += ["--with", package]
    return " ".join(shlex.quote(w) for w in words)


def generate(facts: Facts, options: EnvOptions | None = None) -> Bundle:
    options = options or EnvOptions()
    _check_packages(options.packages)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", options.name):
        raise InputError(
            f"--name {options.name}: not an environment name",
            fix="use letters, digits, '-', '_' or '.'",
        )
    vendor = env_frameworks.vendor_of(facts)
    env_frameworks.check_vendor(vendor, options.framework, options.cuda_variant)
    if options.framework != "torch":
        return _framework_bundle(facts, options)
    if vendor == "amd" and not options.cuda_variant:
        choice = rocm_choice(facts, env_frameworks.rocm_variant_for(facts))
    elif options.cuda_variant and options.cuda_variant.startswith("rocm"):
        choice = rocm_choice(facts, options.cuda_variant)
    else:
        choice = torch_choice(
            facts, cuda_variant=wheel_variant_for_cuda(facts, options.cuda_variant)
        )
    files, decisions = files_for(facts, options, choice)
    warnings = []
    if not options.lock:
        warnings.append(
            "not locked: run ./lock.sh (or pass --lock) to pin requirements.in with hashes"
        )
    return Bundle.of("env", facts, files, decisions, warnings)


# TensorFlow 2.21 and JAX plugins from 0.7.1 publish manylinux_2_27 wheels only: lock for a
# glibc 2.28 Linux (RHEL 8, Debian 10, Ubuntu 20.04 and newer).
_FRAMEWORK_PLATFORM = "x86_64-manylinux_2_28"


def _framework_bundle(facts: Facts, options: EnvOptions) -> Bundle:
    """requirements.in, environment.yml and lock.sh of a TensorFlow or JAX environment."""
    if options.framework not in env_frameworks.FRAMEWORKS:
        raise InputError(
            f"--framework {options.framework}: not a framework dlrig provisions",
            fix="give one of: " + ", ".join(env_frameworks.FRAMEWORKS),
        )
    if options.cuda_variant not in (None, "cpu"):
        raise InputError(
            f"--cuda-variant {options.cuda_variant} is a PyTorch wheel variant",
            fix=f"leave it out ({options.framework}'s GPU extra names its own CUDA wheels), "
            "or give --cuda-variant cpu for the CPU build",
        )
    choice = env_frameworks.choose(
        facts, options.framework, options.framework_version, cpu=options.cuda_variant == "cpu"
    )
    head = header(facts, "env")
    packages = tuple(p.strip() for p in options.packages)
    files = [
        GeneratedFile(
            "requirements.in",
            render(
                "env/framework-requirements.in.j2", header=head, choice=choice, packages=packages
            ),
            "requirements",
            f"{choice.framework} and the other packages, unlocked",
        ),
        GeneratedFile(
            "environment.yml",
            render(
                "env/framework-environment.yml.j2",
                header=head,
                name=options.name,
                choice=choice,
                packages=packages,
            ),
            "yaml",
            "conda environment",
        ),
        GeneratedFile(
            "lock.sh",
            render("env/framework-lock.sh.j2", header=head, choice=choice),
            "shell",
            "re-lock requirements.in with uv",
            executable=True,
        ),
    ]
    decisions = list(choice.decisions)
    warnings = []
    if options.lock:
        body = "\n".join((choice.requirement, *packages)) + "\n"
        locked = compile_lock(body, choice.python, options.timeout_s, platform=_FRAMEWORK_PLATFORM)
        files.append(
            GeneratedFile(
                "requirements.lock",
                head + "\n# Locked by uv pip compile --generate-hashes from requirements.in "
                f"(Python {choice.python}, {_FRAMEWORK_PLATFORM}).\n" + locked,
                "requirements",
                "hashed lock of requirements.in",
            )
        )
        decisions.append(
            Decision(
                "lock",
                f"{locked.count('==')} pinned package(s) with hashes",
                f"uv pip compile for Python {choice.python}, {_FRAMEWORK_PLATFORM}",
            )
        )
    else:
        warnings.append(
            "not locked: run ./lock.sh (or pass --lock) to pin requirements.in with hashes"
        )
    return Bundle.of("env", facts, files, decisions, warnings)

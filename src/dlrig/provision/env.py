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

from dlrig.errors import DlrigError, InputError
from dlrig.provision.model import Bundle, Decision, Facts, GeneratedFile
from dlrig.provision.render import header, render
from dlrig.provision.stack import TorchChoice, torch_choice

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


def compile_lock(requirements_in: str, python: str, timeout_s: float = 180.0) -> str:
    """requirements.in text -> a hashed lock, by `uv pip compile` against the package index."""
    uv = uv_binary()
    if uv is None:
        raise DlrigError(
            "--lock needs uv, which is not installed",
            fix="pip install uv (or drop --lock and run ./lock.sh later)",
        )
    with tempfile.TemporaryDirectory(prefix="dlrig-lock-") as folder:
        source = Path(folder) / "requirements.in"
        source.write_text(requirements_in)
        env = dict(os.environ, UV_PYTHON_DOWNLOADS="never", NO_COLOR="1")
        try:
            result = subprocess.run(
                [
                    uv,
                    "pip",
                    "compile",
                    str(source),
                    "--generate-hashes",
                    "--python-version",
                    python,
                    "--python-platform",
                    "linux",
                    "--quiet",
                    "--no-progress",
                    "--no-header",
                ],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
                cwd=folder,
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
            render("env/lock.sh.j2", header=head, python=choice.python),
            "shell",
            "re-lock requirements.in with uv",
            executable=True,
        ),
    ]
    decisions = list(choice.decisions)
    if options.lock:
        body = "\n".join(packages) + "\n"
        locked = compile_lock(body, choice.python, options.timeout_s)
        note = "# Locked by uv pip compile --generate-hashes from requirements.in (torch: see requirements-torch.txt).\n"
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
                f"uv pip compile for Python {choice.python}, linux",
            )
        )
    return files, decisions


def generate(facts: Facts, options: EnvOptions | None = None, **kwargs: object) -> Bundle:
    options = options or EnvOptions(**kwargs)  # type: ignore[arg-type]
    _check_packages(options.packages)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", options.name):
        raise InputError(
            f"--name {options.name}: not an environment name",
            fix="use letters, digits, '-', '_' or '.'",
        )
    choice = torch_choice(facts, cuda_variant=options.cuda_variant)
    files, decisions = files_for(facts, options, choice)
    warnings = []
    if not options.lock:
        warnings.append(
            "not locked: run ./lock.sh (or pass --lock) to pin requirements.in with hashes"
        )
    return Bundle(
        target="env",
        facts=facts,
        files=tuple(files),
        decisions=tuple(decisions),
        warnings=tuple(warnings),
    )

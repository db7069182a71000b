"""Fixes for Python packages: a module that is missing or lacks a name, a program not on
PATH, an operating-system library a wheel loads, a local file that shadows a package, a
package installed without its compiled extension. Read from dlrig's tables only (no resolver)."""

from __future__ import annotations

import re

from dlrig.diagnose.advice.figures import DOUBT
from dlrig.knowledge import api_changes, extensions
from dlrig.machine.model import Machine


def module_missing(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    module = groups.get("module", "")
    command = groups.get("command")
    if command and not module:
        # a program not on PATH: a package's console script, or a program no pip package has
        provider = extensions.command_provider(command)
        if provider is None:
            return {
                DOUBT: f"no package dlrig knows installs a program named {command}, so a "
                "missing Python package is a guess (a system program, a host name run as a "
                "command, a typo)"
            }
        return {"package": provider.distribution or provider.module}
    known, typo_of = extensions.known_module(module)
    if known is not None and known.windows and facts.get("windows_evidence"):
        package = known.distribution or module
        advice = known.windows[0].upper() + known.windows[1:] + "."
    elif known is not None:
        package = known.distribution or module
        advice = (
            f"Install {package} with the Python that runs the job: {known.command} (a pip, "
            "torchrun or notebook kernel of another environment installs elsewhere)."
        )
    elif typo_of is not None:
        package = typo_of.distribution or typo_of.module
        advice = (
            f"{module} is close to {typo_of.module} ({typo_of.command}): check the spelling "
            f"of the import; if it is right, install the package that provides {module}."
        )
    else:
        package = module.replace("_", "-")
        advice = (
            f"{module} is not a package dlrig knows: if it is the project's own module, run "
            "from the project's root folder (or add it to PYTHONPATH) and check that the import "
            f"names a file the repository has; if it is a package, install it with the Python "
            f"that runs the job (python -m pip install {package})."
        )
    return {"package": package, "module_advice": advice}


def os_library(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    row = extensions.os_library(groups.get("library", ""))
    if row is None:
        return {}
    library = row.library
    ubuntu = f" (Ubuntu 24.04: {row.ubuntu_2404})" if row.ubuntu_2404 != row.debian else ""
    advice = (
        f"Install the system package that provides {library}: sudo apt-get install -y "
        f"{row.debian}{ubuntu} on Debian/Ubuntu, sudo dnf install -y {row.rhel} on RHEL-family "
        f"systems; in a Dockerfile from a Debian 12 image: RUN apt-get update && apt-get "
        f"install -y --no-install-recommends {row.debian}."
    )
    return {"os_package": row.debian, "os_library_advice": advice, "os_library_note": row.note}


def _numpy_abi(groups: dict[str, str]) -> dict[str, str]:
    """NumPy's binary interface. Cython's size check fails when a type is smaller in the
    installed NumPy than in the headers the extension was compiled with: ndarray only grew
    (1.20, 1.22), so the installed NumPy is older; dtype shrank in NumPy 2 (96 to 88 bytes), so
    that is a NumPy 1.x build under NumPy 2, as NumPy 2's own guard says."""
    abi_type, expected, got = groups.get("abi_type", ""), groups.get("expected"), groups.get("got")
    if abi_type == "numpy.ndarray":
        sizes = f" ({expected} bytes there, {got} here)" if expected and got else ""
        return {
            "numpy_abi_said": "An extension module was compiled against a newer NumPy than the "
            "one installed: numpy.ndarray is smaller here than in the headers it was built "
            f"with{sizes}.",
            "numpy_abi_advice": "Upgrade NumPy in this environment (python -m pip install -U "
            "numpy, within what the project's requirements allow), or reinstall the extension "
            "so that its build matches this NumPy (pip install --force-reinstall --no-cache-dir "
            "<package>).",
        }
    return {
        "numpy_abi_said": "An extension module was built against NumPy 1.x and NumPy 2 is "
        "installed (NumPy 2 changed its binary interface).",
        "numpy_abi_advice": "pip install 'numpy<2', or upgrade the extension to a release built "
        "for NumPy 2 (pip install -U <package>).",
    }


def api_mismatch(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    if groups.get("abi_type") or groups.get("numpy1x"):
        return _numpy_abi(groups)
    package = groups.get("package", "the package")
    top = package.split(".")[0]
    name = groups.get("name", "the name")
    known, _ = extensions.known_module(top)
    doubt: dict[str, str] = {}
    if groups.get("unpathed") and known is None:
        # no installed path beside the name, and no package dlrig knows: maybe the project's own
        doubt = {
            DOUBT: f"{package} is not a package dlrig knows and the message shows no installed "
            "path, so it may be the project's own module"
        }
    named_package, named = groups.get("package"), groups.get("name")
    change = api_changes.change_for(named_package, named) if named_package and named else None
    if change is not None:
        return _api_change(change, package)
    dist = (known.distribution or top) if known else top.replace("_", "-")
    required = groups.get("required")
    found = groups.get("found")
    if required and found:
        advice = (
            f"{package} {found} is installed but {package}{required} is required: pip install "
            f'"{package}{required}" (or the versions the project\'s requirements file pins).'
        )
    else:
        advice = (
            f"Install the {dist} release the code was written for: the project's requirements "
            f"file, or pip install -U {dist} if {name} is new (the code may come from the main "
            f"branch); check the spelling of {name} against {package}'s API."
        )
    return {"package_dist": dist, "name": name, "package": package, "api_advice": advice, **doubt}


def shadow_file(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    path = groups.get("path")
    package = groups.get("package")
    if path and package:
        return {
            "package_or_folder": f"{path} (named like the package {package})",
            "shadow_file_advice": (
                f"Rename {path} (and delete the __pycache__ beside it): it is imported instead of "
                f"the installed {package}."
            ),
        }
    return {
        "package_or_folder": "folder of the package's source checkout",
        "shadow_file_advice": (
            "Run from another directory than the package's source checkout (its folder, without "
            "the compiled extensions, is imported instead of the installed package), or build it "
            "in place (pip install -e .)."
        ),
    }


def extension(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """A compiled module dlrig's table knows (apex's amp_C): the build its row names."""
    known, _ = extensions.known_module(groups.get("extension", ""))
    if known is None or not known.install:
        return {}
    return {"extension_advice": known.install[0].upper() + known.install[1:] + "."}


def _api_change(change: api_changes.ApiChange, package: str) -> dict[str, str]:
    """A removal or an addition the table knows: its release and replacement."""
    python = change.distribution == "python"
    label = "Python" if python else change.distribution
    if change.change == "unimported":
        said = (
            f"{change.name} is no longer imported implicitly from {label} {change.version} on, "
            "and the code relies on it."
        )
        advice = (
            f"Use {change.replacement}, or install a {label} older than {change.version} "
            f"(pip install '{label}<{change.version}')."
        )
    elif change.change == "removed":
        said = f"{change.name} was removed in {label} {change.version}, and the code still uses it."
        if python:
            older = f"run it on a Python older than {change.version}"
        elif label == "tensorflow" and change.version == "2.0.0":
            # TensorFlow 1.x has no wheels for Python 3.8 or later
            older = "use TensorFlow 1.15 under Python 3.7 or older"
        else:
            older = f"install a {label} older than {change.version} (pip install '{label}<{change.version}')"
        advice = (
            f"Use {change.replacement} in the code, or {older}."
            if change.replacement
            else f"{older[0].upper()}{older[1:]}."
        )
    else:
        said = f"{change.name} exists from {label} {change.version} on, and the installed {label} is older."
        advice = (
            f"Upgrade it: pip install -U '{label}>={change.version}'. If the installed one is "
            f"that new, a local file or folder named {package.split('.')[0]} shadows the package."
        )
    return {
        "change_said": said,
        "api_advice": advice,
        "package_dist": "" if python else change.distribution,
        "package": package,
    }


def missing_cuda_lib(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    library = groups.get("library", "")
    out = {"library": library or "a CUDA library"}
    match = re.match(r"(?:lib)?([a-zA-Z_]+?)(?:64_|\.so\.?)(\d+)?", library)
    if not match:
        return out
    name, major = match.group(1), match.group(2)
    if name == "cuda":
        out["missing_lib_advice"] = (
            "libcuda.so is part of the NVIDIA driver, not of CUDA: the driver is missing or not on "
            "the loader path (WSL: /usr/lib/wsl/lib must be on LD_LIBRARY_PATH; containers: run "
            "with --gpus all)."
        )
    elif name.startswith("cudnn"):
        windows = library.lower().endswith(".dll")
        folder = "bin folder on PATH" if windows else "lib folder on LD_LIBRARY_PATH"
        out["missing_lib_advice"] = (
            f"The program wants cuDNN {major or ''}".rstrip()
            + ": use the cuDNN your framework's wheel brings (pip show nvidia-cudnn-cu12 or -cu11) "
            f"and put its {folder}, or install the cuDNN release of that major version for your "
            "CUDA."
        )
    elif major and (shipped := extensions.cuda_library_sonames().get((name.lower(), major))):
        # a math library whose soname's number is its own release, not CUDA's (cuFFT 10 is in
        # CUDA 10.1 to 11.8): say which CUDA releases ship it
        pip = f" ({shipped.pip_packages} in a pip setup)" if shipped.pip_packages else ""
        out["missing_lib_advice"] = (
            f"{library} comes with CUDA {shipped.cuda_releases}: the program was built for one of "
            f"those. Install that CUDA's runtime libraries{pip}, or a build of the program for "
            "the CUDA you have."
        )
    elif major:
        out["missing_lib_advice"] = (
            f"The program was built for CUDA {major}: install that CUDA's runtime libraries (the "
            f"CUDA {major} toolkit, or the nvidia-*-cu{major} pip packages of a pip setup), or "
            "install a framework build for the CUDA you have."
        )
    return out

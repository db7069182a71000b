"""Compiled torch extensions and the C++ runtime they need: what a loader error names, as data.

`diagnose` reads "<library>: undefined symbol: _ZN3c10..." and "version `GLIBCXX_3.4.30' not
found"; these tables turn the library's path into the package to reinstall
(`compiled_extensions.csv`) and a libstdc++ symbol version into the GCC release that ships it
(`glibcxx_versions.csv`). A missing Python module's name is looked up in `python_modules.csv`:
the pip distribution that installs it, or the known name it is a typo of. A missing shared
library of the operating system (OpenCV's libGL.so.1) is looked up in `os_libraries.csv`: the
system package that installs it.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass

from dlrig.knowledge.tables import records


@dataclass(frozen=True)
class Extension:
    module: str  # |-separated module names, matched as path components or file-name stems
    package: str
    reinstall: str
    source: str
    as_of: str

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        names = "|".join(re.escape(name) for name in self.module.split("|"))
        # a folder of the path (site-packages/flash_attn/...) or a file's stem
        # (flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so)
        return re.compile(rf"(?:^|[/\\])(?:{names})(?:[/\\._]|$)")


@dataclass(frozen=True)
class RuntimeVersion:
    symbol_version: str
    gcc_version: str
    source: str
    as_of: str


@functools.cache
def extensions() -> tuple[Extension, ...]:
    return records("compiled_extensions", Extension)


@functools.cache
def _runtime_versions() -> dict[str, RuntimeVersion]:
    return {r.symbol_version: r for r in records("glibcxx_versions", RuntimeVersion)}


def extension_for(library: str) -> Extension | None:
    """The known extension a library path belongs to, or None."""
    for extension in extensions():
        if extension.pattern.search(library):
            return extension
    return None


def module_name(library: str) -> str:
    """A readable name for an extension's library: its package folder, else the file's stem."""
    parts = [p for p in re.split(r"[/\\]", library) if p]
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            index = parts.index(marker)
            if index + 1 < len(parts):
                return parts[index + 1].split(".")[0]
    stem = parts[-1] if parts else library
    return stem.split(".")[0]


def gcc_for(symbol_version: str) -> str | None:
    """The first GCC release whose libstdc++ has this symbol version ("GLIBCXX_3.4.30" -> 12.1.0)."""
    found = _runtime_versions().get(symbol_version)
    return found.gcc_version if found else None


_NAME = re.compile(r"(\d+)")


def demangle(symbol: str) -> str:
    """The qualified name of an Itanium-mangled nested name ("_ZN3c104cuda9SetDeviceEi" ->
    "c10::cuda::SetDevice"); the symbol unchanged where it is not that simple shape."""
    if not symbol.startswith("_ZN"):
        return symbol
    rest = symbol[3:]
    if rest.startswith("K"):
        rest = rest[1:]
    names: list[str] = []
    while rest and rest[0].isdigit():
        found = _NAME.match(rest)
        if found is None:
            break
        length = int(found.group(1))
        start = found.end()
        name = rest[start : start + length]
        if len(name) < length:
            return symbol
        names.append(name)
        rest = rest[start + length :]
    if not names or not rest.startswith(("E", "I")):
        return symbol
    return "::".join(names)


@dataclass(frozen=True)
class PythonModule:
    module: str
    distribution: str  # the pip name; empty where no PyPI package provides it
    install: str  # how to install it where plain `pip install <distribution>` is not the way
    windows: str  # what to do on Windows where the package publishes no Windows wheels
    commands: str  # console scripts it installs whose names are not the module's (space-separated)
    source: str
    as_of: str

    @property
    def command(self) -> str:
        return self.install or f"python -m pip install {self.distribution}"


@functools.cache
def python_modules() -> dict[str, PythonModule]:
    return {row.module: row for row in records("python_modules", PythonModule)}


def command_provider(command: str) -> PythonModule | None:
    """The known package that installs the program `command` (a console script), or None:
    "torchrun" is torch's, "llamafactory-cli" LLaMA-Factory's, "accelerate" accelerate's; a
    name that only begins like a package ("torch-model-archiver") is not that package's."""
    table = python_modules()
    for row in table.values():
        if command in row.commands.split():
            return row
    for name in (command, command.replace("-", "_")):
        if name in table:
            return table[name]
    return None


def known_module(name: str) -> tuple[PythonModule | None, PythonModule | None]:
    """(the package `name` imports, or None; else the known module it is most likely a typo of,
    or None). A misspelt "lightning" is close to "lightning"; "model_resnet_mean" to nothing."""
    table = python_modules()
    if name in table:
        return table[name], None
    lowered = {module.lower(): row for module, row in table.items()}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.85)
    return None, lowered[close[0]] if close else None


@dataclass(frozen=True)
class OsLibrary:
    library: str  # the soname the loader asked for
    debian: str  # Debian 12 / Ubuntu 22.04 package
    ubuntu_2404: str  # Ubuntu 24.04's name where the 64-bit time_t transition renamed it
    rhel: str
    note: str
    source: str
    as_of: str


@functools.cache
def os_libraries() -> dict[str, OsLibrary]:
    return {row.library: row for row in records("os_libraries", OsLibrary)}


@functools.cache
def _os_libraries_by_lowered_name() -> dict[str, OsLibrary]:
    return {name.lower(): row for name, row in os_libraries().items()}


def os_library(name: str) -> OsLibrary | None:
    """The row of the library the loader named, whatever its case in the log (the signatures
    ignore case; the table holds the loader's own spelling, "libGL.so.1")."""
    return _os_libraries_by_lowered_name().get(name.lower())


@dataclass(frozen=True)
class CudaLibrarySoname:
    library: str  # the name without lib- and the extension: cufft, cublasLt
    soname_major: str
    cuda_releases: str  # as people say it: "10.1 to 11.8"
    cuda_majors: str  # space-separated
    pip_packages: str
    source: str
    as_of: str


@functools.cache
def cuda_library_sonames() -> dict[tuple[str, str], CudaLibrarySoname]:
    """(library, soname major) -> the CUDA releases that ship it, for the libraries whose
    soname's number is not the CUDA major."""
    return {
        (row.library.lower(), row.soname_major): row
        for row in records("cuda_library_sonames", CudaLibrarySoname)
    }

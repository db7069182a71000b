"""How probes reach the outside world: a command runner and a filesystem root.

Probes take these as arguments instead of calling subprocess or reading "/" directly, so the
same probe code runs against a recorded tree (tests replay real files under a temporary root)
and against the live machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when the command could not run
    stdout: str = ""
    stderr: str = ""
    error: str | None = None  # "not found", "timed out after 5 s", ...

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.error is None


class Runner(Protocol):
    def run(
        self, argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None
    ) -> CommandResult: ...

    def which(self, name: str) -> str | None: ...


class SubprocessRunner:
    """Runs real commands with a timeout; never raises for a missing or failing command."""

    def run(
        self, argv: Sequence[str], timeout_s: float, env: Mapping[str, str] | None = None
    ) -> CommandResult:
        args = tuple(argv)
        try:
            completed = subprocess.run(
                args,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout_s,
                env=dict(env) if env is not None else None,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except FileNotFoundError:
            return CommandResult(args, None, error="not found")
        except PermissionError:
            return CommandResult(args, None, error="permission denied")
        except subprocess.TimeoutExpired:
            return CommandResult(args, None, error=f"timed out after {timeout_s:g} s")
        except OSError as exc:
            return CommandResult(args, None, error=exc.strerror or str(exc))
        return CommandResult(args, completed.returncode, completed.stdout, completed.stderr)

    def which(self, name: str) -> str | None:
        return shutil.which(name)


@dataclass(frozen=True)
class ProbeContext:
    """Everything a probe may consult."""

    runner: Runner = field(default_factory=SubprocessRunner)
    root: Path = Path("/")
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    python: str | None = None  # interpreter whose frameworks to describe; None = this one
    timeout_s: float = 10.0
    data_paths: tuple[str, ...] = ()  # extra paths whose mounts count as data storage
    read_kernel_log: bool = True

    def path(self, absolute: str) -> Path:
        """A path of the probed machine, under `root`."""
        return self.root / absolute.lstrip("/")

    def read(self, absolute: str) -> str | None:
        """A small text file of the probed machine, or None when absent or unreadable."""
        try:
            return self.path(absolute).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None

"""Every benchmark's output as a dated file: benchmarks/results/<bench>_<machine>_<date>.md.

A benchmark runs its `main()` inside `record(__file__)`: what it prints still goes to the
terminal, and the same text lands in the results file with what it ran on (CPU, cores, GPUs,
Python, torch, dlrig and its git commit), so a figure quoted in the docs can be traced to the
run that produced it. The machine part of the name is the GPU (or "cpu") and the core count.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import io
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


class _Tee(io.TextIOBase):
    def __init__(self, *streams: io.TextIOBase) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def _cpu() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def _gpus() -> list[str]:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        if done.returncode == 0:
            return [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return []


def _commit() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if done.returncode == 0:
            return done.stdout.strip()
    return "unknown"


def machine_slug(gpus: list[str], cores: int) -> str:
    """'h200-16c', 'cpu-2c': what the figures were measured on, short enough for a name."""
    kind = gpus[0] if gpus else "cpu"
    kind = re.sub(r"^(nvidia|amd)\s+", "", kind, flags=re.I)
    kind = re.sub(r"[^a-z0-9]+", "-", kind.lower()).strip("-")
    return f"{kind}-{cores}c"


@contextlib.contextmanager
def record(script: str) -> Iterator[None]:
    """Run the body with stdout copied into the results file for `script`."""
    buffer = io.StringIO()
    original = sys.stdout
    sys.stdout = _Tee(original, buffer)  # type: ignore[assignment]
    started = _dt.datetime.now(_dt.UTC)
    code: object = 0
    try:
        yield
    except SystemExit as exc:
        code = exc.code
        raise
    finally:
        sys.stdout = original
        _write(script, buffer.getvalue(), started, code)


def _write(script: str, output: str, started: _dt.datetime, code: object) -> None:
    name = Path(script).stem
    gpus = _gpus()
    cores = os.cpu_count() or 1
    try:
        import torch

        torch_version = str(torch.__version__)
    except ImportError:
        torch_version = "not installed"
    from dlrig import __version__

    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}_{machine_slug(gpus, cores)}_{started:%Y-%m-%d}.md"
    ok = "passed" if code in (0, None) else f"failed ({code})"
    command = shlex.join(
        [Path(sys.executable).name, f"benchmarks/{Path(script).name}", *sys.argv[1:]]
    )
    lines = [
        f"# {name}, {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"- command: `{command}` ({ok})",
        f"- machine: {_cpu()}, {cores} cores; GPUs: {', '.join(gpus) or 'none'}; "
        f"load average at the end {os.getloadavg()[0]:.2f}",
        f"- software: Python {platform.python_version()}, torch {torch_version}, "
        f"dlrig {__version__} at {_commit()}",
        "",
        "```",
        output.rstrip(),
        "```",
        "",
    ]
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    os.replace(tmp, path)
    # on stderr: a benchmark's last line on stdout stays its key=value summary
    sys.stderr.write(f"results: {path.relative_to(ROOT)}\n")

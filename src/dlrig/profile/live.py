"""`dlrig profile -- CMD`: run the user's command with the profiler armed in every Python
process it starts, pass its output through unchanged, then analyse the traces it left."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from dlrig import wrap
from dlrig.errors import InputError
from dlrig.profile.boot import dlrig_profile_boot as boot
from dlrig.profile.hook import collect
from dlrig.profile.model import ProfileReport

BOOT_DIR = Path(boot.__file__).resolve().parent


@dataclass(frozen=True)
class Options:
    steps: int = 5
    warmup: int = 1
    wait: int = 1
    flops: bool = True
    gpu_counters: bool = True  # read NVML/GPM while the command runs (where NVML is)


def environment(out: Path, options: Options, base: dict[str, str] | None = None) -> dict[str, str]:
    """The command's environment: the driver's settings and the boot folder first on
    PYTHONPATH (before the user's own entries, which keep their order)."""
    env = dict(os.environ if base is None else base)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(BOOT_DIR) + (os.pathsep + path if path else "")
    env[boot.ENV_DIR] = str(out)
    env[boot.ENV_STEPS] = str(options.steps)
    env[boot.ENV_WARMUP] = str(options.warmup)
    env[boot.ENV_WAIT] = str(options.wait)
    env[boot.ENV_FLOPS] = "1" if options.flops else "0"
    return env


def run(
    command: Sequence[str],
    options: Options,
    out: Path | None = None,
    stdout_fd: int | None = None,
    feed: Callable[[bytes, str], None] | None = None,
) -> tuple[ProfileReport, int]:
    """Run `command` profiled; the report and the command's exit code. A command that ends
    before its first profiled step raises InputError (exit 2) when it succeeded; one that
    failed keeps its own exit code (`.exit_code` on the error)."""
    holder = None
    if out is None:
        holder = tempfile.TemporaryDirectory(prefix="dlrig-profile-")
        folder = Path(holder.name)
    else:
        folder = out
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.glob("trace-*.json.gz"):
            stale.unlink()  # a trace from an earlier run must not pass for this one's
        for stale in folder.glob("meta-*.json"):
            stale.unlink()
    try:
        env = environment(folder, options)
        outcome = wrap.run(
            command, feed or (lambda data, source: None), stdout_fd=stdout_fd, env=env
        )
        code = outcome.exit_code
        report = collect(folder, command=list(command), exit_code=code)
        if report is None:
            needed = boot.first_recorded_step(options.wait, options.warmup)
            error = InputError(
                f"`{' '.join(command)}` exited with {code} before its first profiled step "
                f"(dlrig profiles from the {_ordinal(needed)} optimizer step on)",
                fix="let the job run longer (or pass --wait 1 --warmup 0), and check that it "
                "steps a torch.optim optimizer; a loop without one can use "
                "dlrig.profile.Session and session.step()",
            )
            if code != 0:
                error.exit_code = code
            raise error
        return report, code
    finally:
        if holder is not None:
            holder.cleanup()


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"

"""Shared paths and helpers for the test suite.

Fixtures are real recorded outputs (tests/fixtures, copied from public repositories with their
licences; see tests/fixtures/nvidia-smi/SOURCES.md) and real pastes from public bug reports
(tests/corpus, each with its thread's address).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import pytest

if TYPE_CHECKING:
    from dlrig.diagnose import Finding

ROOT = Path(__file__).resolve().parent.parent

# fit and plan keep traced steps in the user's cache (dlrig.fit.cache): tests trace afresh and
# leave nothing in ~/.cache, except tests/cli/test_fit_cache.py, which turns it on in a tmp dir.
os.environ["DLRIG_NO_CACHE"] = "1"
FIXTURES = ROOT / "tests" / "fixtures"
NVSMI = FIXTURES / "nvidia-smi"
AMD = FIXTURES / "amd"
GAUDI = FIXTURES / "gaudi"
CORPUS = ROOT / "tests" / "corpus"


def corpus_root(log: str) -> Finding:
    """The root finding `dlrig diagnose` gives for a corpus log (tests/corpus/logs/LOG), asserted
    to exist: the diagnose tests' shared helper (dlrig.diagnose is imported when first used)."""
    from dlrig import diagnose

    root = diagnose.diagnose_paths([CORPUS / "logs" / log]).root
    assert root is not None, log
    return root


class Ran(NamedTuple):
    """What a dlrig run left: the same three fields as subprocess.CompletedProcess."""

    returncode: int
    stdout: str
    stderr: str


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    return 1  # sys.exit("message") exits 1, as the interpreter does


@pytest.fixture
def run_dlrig(monkeypatch: pytest.MonkeyPatch):
    """Run `dlrig` in this process through click's CliRunner isolation; returns a `Ran`.

    The same entry point as the console script (`dlrig.cli.main.main`, which turns errors into
    exit codes), with stdin, stdout, stderr and the environment swapped for the call. Tests where
    a real process is the point (signals, pipes, children, lifecycle) use `run_dlrig_process`.
    """
    from click.testing import CliRunner

    from dlrig import lifecycle
    from dlrig.cli.main import main

    monkeypatch.chdir(ROOT)

    def run(*args: str, input: str | None = None, timeout: float | None = None, env=None):
        # timeout is accepted for call sites shared with run_dlrig_process; an in-process run
        # has no wall-clock limit (pytest-timeout still guards the test).
        overrides: dict[str, str | None] = {"DLRIG_DEBUG": None}
        overrides.update(env or {})
        handlers = {signum: signal.getsignal(signum) for signum in lifecycle.STOP_SIGNALS}
        runner = CliRunner()
        code = 0
        try:
            with runner.isolation(input=input, env=overrides) as (out, err, _):
                try:
                    main(list(args))
                except SystemExit as exc:
                    code = _exit_code(exc.code)
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                stdout = out.getvalue().decode("utf-8", "replace")
                stderr = err.getvalue().decode("utf-8", "replace")
        finally:
            for signum, handler in handlers.items():
                signal.signal(signum, handler)
        return Ran(code, stdout, stderr)

    return run


@pytest.fixture
def run_dlrig_process():
    """Run the real `dlrig` console script in a subprocess; returns CompletedProcess."""

    def run(*args: str, input: str | None = None, timeout: float = 120, env: dict | None = None):
        full_env = dict(os.environ)
        full_env.pop("DLRIG_DEBUG", None)
        if env:
            full_env.update(env)
        return subprocess.run(
            [sys.executable, "-m", "dlrig.cli.main", *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
            env=full_env,
            cwd=ROOT,
        )

    return run

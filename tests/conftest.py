"""Shared paths and helpers for the test suite.

Fixtures are real recorded outputs (tests/fixtures, copied from public repositories with their
licences; see tests/fixtures/nvidia-smi/SOURCES.md) and real pastes from public bug reports
(tests/corpus, each with its thread's address).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# fit and plan keep traced steps in the user's cache (dlrig.fit.cache): tests trace afresh and
# leave nothing in ~/.cache, except tests/cli/test_fit_cache.py, which turns it on in a tmp dir.
os.environ["DLRIG_NO_CACHE"] = "1"
FIXTURES = ROOT / "tests" / "fixtures"
NVSMI = FIXTURES / "nvidia-smi"
CORPUS = ROOT / "tests" / "corpus"


@pytest.fixture
def run_dlrig():
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

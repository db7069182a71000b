"""GPU smoke tests: they run where CUDA and NVML work (`make gpu`, benchmarks/gpu_suite.sh).

Each module sets `pytestmark = pytest.mark.gpu`; pyproject's addopts deselect that marker, so a CPU-only
machine runs none of them rather than skipping them. Figures they measure go to
$DLRIG_GPU_OUT (default out/gpu-suite/) as JSON, for the suite's summary and the README table.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def cuda() -> Any:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device here: the GPU suite runs where one is")
    return torch


@pytest.fixture(scope="session")
def figures() -> Any:
    """record(name, document): write one figure file under $DLRIG_GPU_OUT."""
    folder = Path(os.environ.get("DLRIG_GPU_OUT", "out/gpu-suite"))
    folder.mkdir(parents=True, exist_ok=True)

    def record(name: str, document: dict[str, Any]) -> None:
        (folder / f"{name}.json").write_text(json.dumps(document, indent=2, default=str) + "\n")

    return record

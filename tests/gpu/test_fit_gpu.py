"""fit's predictions against real training steps on this GPU (benchmarks/gpu_fit_truth.py)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.gpu


def _harness():
    path = ROOT / "benchmarks" / "gpu_fit_truth.py"
    spec = importlib.util.spec_from_file_location("gpu_fit_truth", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_fit_truth"] = module
    spec.loader.exec_module(module)
    return module


def _catalogue_id(torch) -> str:
    from dlrig.knowledge import gpus

    spec = gpus.catalogue().resolve(torch.cuda.get_device_name(0))
    if spec is None:
        pytest.skip(f"{torch.cuda.get_device_name(0)} is not in the GPU catalogue")
    return spec.id


HARNESS = _harness()


@pytest.mark.parametrize("case", HARNESS.CASES, ids=lambda c: c.name)
def test_fit_prediction_against_a_real_step(cuda, figures, case):
    row = HARNESS.compare(case, "cuda:0", _catalogue_id(cuda))
    figures(f"fit_truth_{case.name}", row)
    # Recorded for the README table; a sanity bound here, the accuracy target is fit's own.
    assert row["memory_error"] is not None and abs(row["memory_error"]) < 0.5, row
    assert row["time_error"] is not None and abs(row["time_error"]) < 1.0, row

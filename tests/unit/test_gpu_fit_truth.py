"""The GPU suite's fit ground-truth harness, run on the CPU so its code path is known to work
before a GPU is lent (benchmarks/gpu_fit_truth.py; on a GPU, tests/gpu/test_fit_gpu.py)."""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

from tests.conftest import ROOT

# Real processes and training steps: the slow tier (make test runs it, make test-fast does not).
pytestmark = pytest.mark.slow

pytest.importorskip("torch")


def _harness():
    path = ROOT / "benchmarks" / "gpu_fit_truth.py"
    spec = importlib.util.spec_from_file_location("gpu_fit_truth", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_fit_truth"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_case_names_a_fit_preset():
    from dlrig.fit import presets

    harness = _harness()
    assert {case.preset for case in harness.CASES} <= set(presets.presets())
    assert any(case.lora for case in harness.CASES)
    assert len({case.preset for case in harness.CASES}) >= 4


@pytest.mark.parametrize(
    "case",
    [
        dict(name="gpt2-1l", preset="gpt2", batch_size=2, seq_len=32, layers=1),
        dict(name="resnet-1", preset="resnet50", batch_size=2, image_size=64, layers=1),
    ],
    ids=lambda c: c["name"],
)
def test_a_real_training_step_is_measured_on_the_cpu(case):
    harness = _harness()
    measured = harness.measure(harness.Case(**case), "cpu", steps=3)
    assert measured["step_time_s"] > 0 and math.isfinite(measured["step_time_s"])
    assert "max_memory_allocated_bytes" not in measured  # CUDA figures only on CUDA


def test_errors_are_relative_to_the_measurement():
    harness = _harness()
    assert harness.error(110, 100) == pytest.approx(0.10)
    assert harness.error(None, 100) is None

"""LoRA/QLoRA through peft on the real model, against published measured memory."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from dlrig import fit


def run(**kwargs):
    kwargs.setdefault("search_max_batch", False)
    kwargs.setdefault("advise", False)
    return fit.estimate(**kwargs)


def test_frozen_parameters_have_no_gradients_or_optimizer_state():
    full = run(model="gpt2", gpu="a100", seq_len=512, batch_size=4)
    lora = run(model="gpt2", gpu="a100", seq_len=512, batch_size=4, lora=8)
    assert lora.trainable_params < full.trainable_params / 100
    assert lora.memory_breakdown["optimizer_state"] == 8 * lora.trainable_params
    assert lora.memory_peak_bytes < full.memory_peak_bytes
    qlora = run(model="llama3-8b", gpu="a100", seq_len=256, batch_size=1, qlora=8)
    # NF4 + double quantisation: ~0.516 bytes for each of the 6.98e9 linear weights (3.6 GB);
    # peft's prepare_model_for_kbit_training (on by default) leaves the 2 x 525M embedding and
    # head weights in fp32 (4.2 GB)
    assert 7.3e9 < qlora.memory_breakdown["parameters"] < 8.3e9
    assert qlora.params == pytest.approx(8.03e9, rel=0.01)


# The published LoRA/QLoRA measurements (LitGPT's A100 and A10G tables, Unsloth's HF+FA2
# baseline) are rows of benchmarks/data/measured_training.csv, each checked in
# tests/unit/test_fit_accuracy.py::test_lora_and_qlora_memory_of_7_8b_models_against_published_figures
# with the trace the benchmark stores.

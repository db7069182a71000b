"""`dlrig fit` as users run it."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")


def test_json_for_a_preset(run_dlrig):
    done = run_dlrig(
        "fit", "gpt2", "--gpu", "a100-sxm4-80gb", "--batch-size", "4", "--json", "--no-max-batch"
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["schema_version"] == 1
    assert document["fits"] is True
    assert document["memory"]["peak_bytes"] > sum(
        document["memory"]["breakdown"][k] for k in ("parameters", "gradients")
    )


def test_text_report_has_the_bar_and_assumptions(run_dlrig):
    done = run_dlrig("fit", "resnet50", "--gpu", "t4", "--batch-size", "32", "--no-max-batch")
    assert done.returncode == 0, done.stderr
    assert "FITS" in done.stdout and "█" in done.stdout
    assert "assumptions:" in done.stdout


def test_does_not_fit_exits_1(run_dlrig):
    done = run_dlrig(
        "fit", "llama3-8b", "--gpu", "t4", "--seq-len", "1024", "--no-max-batch", "--json"
    )
    assert done.returncode == 1
    assert json.loads(done.stdout)["fits"] is False


def test_no_gpu_here_needs_gpu_flag(run_dlrig):
    done = run_dlrig("fit", "gpt2")
    assert done.returncode == 2
    assert "--gpu" in done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_preset_and_listings(run_dlrig):
    done = run_dlrig("fit", "bert-larg", "--gpu", "t4")
    assert done.returncode == 2
    assert "did you mean bert-large" in done.stderr
    listing = json.loads(run_dlrig("fit", "--list-presets", "--json").stdout)
    assert {p["name"] for p in listing["presets"]} >= {
        "resnet50",
        "resnet101",
        "vit-b16",
        "vit-l16",
        "bert-base",
        "bert-large",
        "gpt2",
        "gpt2-xl",
        "t5-base",
        "llama3-8b",
        "llama3-70b",
        "mistral-7b",
    }
    assert run_dlrig("fit", "--list-gpus").returncode == 0


def test_custom_factory_errors_are_one_line(run_dlrig):
    done = run_dlrig(
        "fit", "tests.data.custom_models:make_raising", "--input", "x:float32[B,4]", "--gpu", "t4"
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "factory raised FileNotFoundError" in done.stderr

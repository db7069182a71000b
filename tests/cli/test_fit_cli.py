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
    assert list(document)[:2] == ["schema", "schema_version"]
    assert document["schema"] == "dlrig.fit" and document["schema_version"] == 2
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


def test_options_after_the_model_and_help_exit_codes(run_dlrig):
    before = run_dlrig(
        "fit", "--gpu", "a100", "--json", "--no-max-batch", "--batch-size", "2", "gpt2"
    )
    after = run_dlrig(
        "fit", "gpt2", "--batch-size", "2", "--no-max-batch", "--gpu", "a100", "--json"
    )
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert json.loads(before.stdout)["memory"] == json.loads(after.stdout)["memory"]
    help_text = run_dlrig("fit", "--help").stdout
    assert "Exit codes:" in help_text.split("Options:")[-1]


@pytest.mark.parametrize(
    "args",
    [
        ["resnet50", "--gpu", "v100-sxm2-16gb", "--seq-len", "128"],
        ["gpt2", "--gpu", "a100", "--seq-len", "4096"],
        ["bert-large", "--gpu", "a100", "--epochs", "-1", "--dataset-size", "100"],
        ["bert-large", "--gpu", "a100", "--gpus-per-node", "0"],
        ["bert-large", "--gpu", "a100", "--gpus", "16", "--network-gbps", "-5"],
        ["llama3-8b", "--gpu", "t4", "--precision", "amp-bf16"],
        ["gpt2", "--gpu", "rtx"],
    ],
)
def test_bad_input_exits_2_with_one_line(run_dlrig, args):
    done = run_dlrig("fit", *args, "--no-max-batch")
    assert done.returncode == 2, done.stdout
    assert len(done.stderr.strip().splitlines()) == 1 and "fix:" in done.stderr
    assert "Traceback" not in done.stderr


def test_alias_and_analytic_config(run_dlrig):
    config = "tests/data/hf_configs/qwen2.5-7b-instruct.json"
    done = run_dlrig("fit", "--config", config, "--analytic", "--gpu", "a100", "--json")
    assert done.returncode == 1, done.stderr  # 7.6B with fp32 AdamW: 16 bytes/param > 80 GB
    document = json.loads(done.stdout)
    assert document["fits"] is False
    assert document["method"] == "analytic" and document["gpu"] == "a100-sxm4-80gb"
    assert abs(document["params"] - 7.62e9) / 7.62e9 < 0.02

"""`dlrig fit` as users run it.

Commands that trace run through the console script's own entry point (`dlrig.cli.main.main`) in
this process, so that they share the session's traces with the unit tests (a subprocess would
import torch and trace again); exit codes, stdout and stderr are the script's. Process-level
behaviour (the one-line error, no traceback) runs in real subprocesses (`run_dlrig`).
"""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass

import pytest

pytest.importorskip("transformers")


@dataclass
class Done:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def dlrig_here(capsys):
    from dlrig import lifecycle
    from dlrig.cli.main import main

    def run(*args: str) -> Done:
        saved = {s: signal.getsignal(s) for s in lifecycle.STOP_SIGNALS}
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = int(exc.code or 0)
        finally:
            for signum, handler in saved.items():
                signal.signal(signum, handler)
        out = capsys.readouterr()
        return Done(code, out.out, out.err)

    return run


def test_json_and_text_for_a_preset(dlrig_here):
    done = dlrig_here(
        "fit",
        "gpt2",
        "--gpu",
        "a100-sxm4-80gb",
        "--batch-size",
        "4",
        "--seq-len",
        "512",
        "--json",
        "--no-max-batch",
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert list(document)[:2] == ["schema", "schema_version"]
    assert document["schema"] == "dlrig.fit" and document["schema_version"] == 2
    assert document["fits"] is True
    assert document["memory"]["peak_bytes"] > sum(
        document["memory"]["breakdown"][k] for k in ("parameters", "gradients")
    )
    text = dlrig_here(
        "fit", "gpt2", "--gpu", "t4", "--batch-size", "4", "--seq-len", "512", "--no-max-batch"
    )
    assert text.returncode == 0, text.stderr
    assert "FITS" in text.stdout and "█" in text.stdout
    assert "assumptions:" in text.stdout and "amp-fp16" in text.stdout


def test_no_gpu_here_needs_gpu_flag(run_dlrig):
    done = run_dlrig("fit", "gpt2")
    assert done.returncode == 2
    assert "--gpu" in done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_preset_and_listings(run_dlrig, dlrig_here):
    done = run_dlrig("fit", "bert-larg", "--gpu", "t4")
    assert done.returncode == 2
    assert "did you mean bert-large" in done.stderr
    listing = json.loads(dlrig_here("fit", "--list-presets", "--json").stdout)
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
    listed = dlrig_here("fit", "--list-gpus")
    assert listed.returncode == 0
    # issue 24: a card without bf16 shows its fp16 tensor rate, never "bf16 0.0 TFLOPS"
    assert " 0.0 TFLOPS" not in listed.stdout
    v100 = next(line for line in listed.stdout.splitlines() if line.startswith("v100-sxm2-16gb"))
    assert "fp16   125.0 TFLOPS" in v100


def test_options_after_the_model_and_help_exit_codes(dlrig_here):
    before = dlrig_here(
        "fit",
        "--gpu",
        "a100",
        "--json",
        "--no-max-batch",
        "--batch-size",
        "2",
        "--seq-len",
        "512",
        "gpt2",
    )
    after = dlrig_here(
        "fit",
        "gpt2",
        "--batch-size",
        "2",
        "--seq-len",
        "512",
        "--no-max-batch",
        "--gpu",
        "a100",
        "--json",
    )
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert json.loads(before.stdout)["memory"] == json.loads(after.stdout)["memory"]
    help_text = dlrig_here("fit", "--help").stdout
    assert "Exit codes:" in help_text.split("Options:")[-1]


def test_bad_input_exits_2_with_one_line(run_dlrig):
    """The CLI turns an InputError into one line and exit 2 (the API cases of the same checks
    are in tests/unit/test_fit.py::test_bad_input)."""
    for args in (
        ["resnet50", "--gpu", "v100-sxm2-16gb", "--seq-len", "128"],
        ["gpt2", "--gpu", "a100", "--gpus", "16", "--network-gbps", "-5"],
        ["gpt2", "--gpu", "a100", "--lora", "8", "--lora-dropout", "1.5"],
        ["gpt2", "--gpu", "a100", "--lora", "8", "--no-double-quant"],
        ["gpt2", "--gpu", "a100", "--fp8"],
        ["gpt2", "--gpu", "h100", "--compile", "--compile-blocks"],
    ):
        done = run_dlrig("fit", *args, "--no-max-batch")
        assert done.returncode == 2, done.stdout
        assert len(done.stderr.strip().splitlines()) == 1 and "fix:" in done.stderr
        assert "Traceback" not in done.stderr


def test_analytic_config_names_the_model_and_defaults_to_bf16(dlrig_here):
    config = "tests/data/hf_configs/qwen2.5-7b-instruct.json"
    done = dlrig_here("fit", "--config", config, "--analytic", "--gpu", "a100", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["method"] == "analytic" and document["gpu"] == "a100-sxm4-80gb"
    assert abs(document["params"] - 7.62e9) / 7.62e9 < 0.02
    # the checkpoint says bfloat16: bf16 weights, gradients and AdamW state, 8 bytes/param
    assert any("precision bf16" in a for a in document["assumptions"])
    assert document["model"] == "qwen2.5-7b-instruct"  # the config's name, not its path
    # fp32 master weights with bf16 autocast: 16 bytes/param = 122 GB > 80 GB, exit 1
    mixed = dlrig_here(
        "fit", "--config", config, "--analytic", "--gpu", "a100", "--precision", "amp-bf16"
    )
    assert mixed.returncode == 1, mixed.stderr
    assert "DOES NOT FIT" in mixed.stdout and "qwen2.5-7b-instruct" in mixed.stdout
    assert "hf_configs/" not in mixed.stdout.splitlines()[0]


def test_the_issues_70b_fsdp_command_fits(dlrig_here):
    """Issue 11's command: Hugging Face fine-tuned Llama-2-70B with FSDP on 16 x A100 80 GB
    (huggingface/blog ram-efficient-pytorch-fsdp.md, 2023), so this must say it fits. That run
    predates Accelerate 0.30 (huggingface/accelerate#2674, 2024), which upcasts trainable FSDP
    parameters to fp32 under mixed precision: it sharded the checkpoint's bf16 weights as they
    were, which is --precision bf16. Today's default (fp32 masters) is issue 24's point."""
    command = [
        "fit",
        "llama3-70b",
        "--gpu",
        "a100-sxm4-80gb",
        "--gpus",
        "16",
        "--strategy",
        "fsdp",
        "--grad-checkpointing",
        "--seq-len",
        "2048",
    ]
    done = dlrig_here(*command, "--precision", "bf16")
    assert done.returncode == 0, done.stderr
    assert "FITS" in done.stdout and "DOES NOT FIT" not in done.stdout
    # the default shards fp32 master weights, as Accelerate and DeepSpeed do, and says why
    default = dlrig_here(*command)
    assert "precision amp-bf16 (default for FSDP/ZeRO: fp32 master weights" in default.stdout
    assert "Accelerate" in default.stdout


def test_compile_alone_means_the_whole_model_and_options_go_anywhere(dlrig_here):
    common = ["--gpu", "h100", "--batch-size", "2", "--seq-len", "256", "--json", "--no-max-batch"]
    whole = dlrig_here("fit", "--compile", "gpt2", *common)
    blocks = dlrig_here("fit", "gpt2", *common, "--compile-blocks", "--fp8")
    eager = dlrig_here("fit", "gpt2", *common)
    for done in (whole, blocks, eager):
        assert done.returncode == 0, done.stderr
    whole_doc, blocks_doc, eager_doc = (json.loads(d.stdout) for d in (whole, blocks, eager))
    assert whole_doc["setup"]["compile"] == "model" and whole_doc["setup"]["fp8"] is False
    assert blocks_doc["setup"]["compile"] == "blocks" and blocks_doc["setup"]["fp8"] is True
    assert eager_doc["setup"]["compile"] == "none"
    activations = [d["memory"]["breakdown"]["activations"] for d in (whole_doc, eager_doc)]
    assert activations[0] < activations[1]
    assert any("torch.compile of the whole model" in a for a in whole_doc["assumptions"])

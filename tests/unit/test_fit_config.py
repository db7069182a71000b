"""Any model people name: real config.json files, a model folder, and the local Hub cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from dlrig import fit
from dlrig.errors import InputError

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "hf_configs"


def run(**kwargs):
    kwargs.setdefault("search_max_batch", False)
    kwargs.setdefault("advise", False)
    kwargs.setdefault("gpu", "h100-sxm5-80gb")
    return fit.estimate(fit.Options(**kwargs))


# published sizes (model cards / papers), billions of parameters, and the tolerance they allow
PUBLISHED = {
    "llama-3.1-8b": (8.03, 0.01),  # Llama 3.1 model card: 8.03B
    "llama-3.2-3b": (3.21, 0.01),  # Llama 3.2 model card: 3.21B
    "llama-3.1-70b": (70.6, 0.01),  # Llama 3.1 model card: 70.6B
    "llama-2-7b-hf": (6.74, 0.01),  # Llama 2 paper, Table 1: 6.7B (6,738,415,616 in HF)
    "llama-2-13b-hf": (13.0, 0.01),  # Llama 2 paper: 13B (13,015,864,320)
    "mistral-7b-v0.3": (7.25, 0.01),  # Mistral 7B v0.3: 7.25B
    "mixtral-8x7b-v0.1": (46.7, 0.01),  # Mixtral of Experts paper: 47B total (46.7B)
    "gemma-2-9b": (9.24, 0.01),  # Gemma 2 report, Table 1 (embedding 917.5M + 8.32B)
    "phi-4-mini-instruct": (3.84, 0.01),  # Phi-4-mini model card: 3.8B (3.84B)
    "qwen2.5-7b-instruct": (7.62, 0.01),  # Qwen2.5 model card: 7.61B
    "qwen3-0.6b": (0.596, 0.02),  # Qwen3-0.6B model card: 0.6B (0.44B non-embedding)
    "phi-1_5": (1.42, 0.01),  # phi-1.5: 1.3B in the card's prose, 1,418,270,720 in HF
    "t5-base": (0.223, 0.01),  # T5 paper: 220M; HF T5ForConditionalGeneration 222.9M
    "vit-base-patch16-224": (0.0866, 0.01),  # ViT-B/16 ImageNet-1k head: 86.6M
}
# traced end to end (the rest are built on fake tensors and sized analytically): MoE experts,
# eager attention without SDPA (Gemma 2, T5), a vision model, a small LLM
TRACED = ("mixtral-8x7b-v0.1", "gemma-2-9b", "t5-base", "vit-base-patch16-224", "qwen3-0.6b")


def test_every_config_file_has_a_published_size_and_a_source():
    files = {p.stem for p in CONFIGS.glob("*.json")}
    assert files == set(PUBLISHED)
    sources = (CONFIGS / "SOURCES.md").read_text()
    for name in files:
        assert f"`{name}.json`" in sources, name


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_config_builds_to_the_published_size(name):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from dlrig.fit.build import skip_weight_init
    from dlrig.fit.hfconfig import config_workload

    billions, tolerance = PUBLISHED[name]
    options = fit.Options(model=name, config=str(CONFIGS / f"{name}.json"))
    workload = config_workload(options.config, options)
    with FakeTensorMode(), skip_weight_init():
        model = workload.build(None)
    count = sum(p.numel() for p in model.parameters())
    assert count / 1e9 == pytest.approx(billions, rel=tolerance)
    if workload.task != "causal_lm":  # --analytic counts decoder-only configs, and says so
        with pytest.raises(InputError, match="counts decoder-only configs"):
            run(model=name, config=options.config, analytic=True)
        return
    analytic = run(model=name, config=options.config, analytic=True)
    assert analytic.method == "analytic"
    assert analytic.params == pytest.approx(count, rel=0.01)


@pytest.mark.parametrize("name", TRACED)
def test_config_traces_to_the_published_size(name):
    billions, tolerance = PUBLISHED[name]
    text = {"seq_len": None} if name.startswith("vit") else {"seq_len": 128}
    result = run(model=name, config=str(CONFIGS / f"{name}.json"), batch_size=1, **text)
    assert result.method == "trace"
    assert result.params / 1e9 == pytest.approx(billions, rel=tolerance)
    assert result.flops_per_step and result.flops_per_step > 0
    if name in ("t5-base", "gemma-2-9b"):  # no SDPA path in transformers: eager attention
        traced = fit.trace(fit.Options(model=name, config=str(CONFIGS / f"{name}.json"), **text))
        names = traced.samples[1][-1][1].ops.names
        assert not any(n.startswith("dlrig_fit.attention") for n in names)
        assert any("eager attention" in note for note in result.notes)


def test_mixtral_experts_are_traced_as_grouped_gemms():
    """Mixtral's 8 experts run as transformers' grouped GEMM: the trace counts the FLOPs of
    the 2 routed experts per token, not all 8, and keeps all 46.7B parameters."""
    result = run(
        model="mixtral", config=str(CONFIGS / "mixtral-8x7b-v0.1.json"), seq_len=128, batch_size=1
    )
    tokens = 128
    # 6 x active parameters per token: 12.9B active of 46.7B (Mixtral paper: 13B active)
    assert result.flops_per_step / (6 * tokens) / 1e9 == pytest.approx(12.9, rel=0.1)
    assert "analytic" not in result.method


def test_model_folder_and_hub_cache(tmp_path, monkeypatch):
    folder = tmp_path / "qwen"
    folder.mkdir()
    shutil.copy(CONFIGS / "qwen3-0.6b.json", folder / "config.json")
    from_folder = run(model="qwen", config=str(folder), seq_len=128, batch_size=1)
    # the layout huggingface_hub writes: models--ORG--NAME/{refs/main, snapshots/REV/}
    cache = tmp_path / "hub"
    snapshot = cache / "models--Qwen--Qwen3-0.6B" / "snapshots" / "c1899de"
    snapshot.mkdir(parents=True)
    (cache / "models--Qwen--Qwen3-0.6B" / "refs").mkdir()
    (cache / "models--Qwen--Qwen3-0.6B" / "refs" / "main").write_text("c1899de")
    shutil.copy(CONFIGS / "qwen3-0.6b.json", snapshot / "config.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    from_hub = run(model="Qwen/Qwen3-0.6B", seq_len=128, batch_size=1)
    assert from_hub.params == from_folder.params
    with pytest.raises(InputError, match="not in the local Hugging Face cache") as missing:
        run(model="meta-llama/Llama-3.1-8B")
    assert "hf download meta-llama/Llama-3.1-8B config.json" in missing.value.fix


def test_unreadable_configs_are_one_line(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        run(model="x", config=str(bad))
    bad.write_text(json.dumps({"hidden_size": 3}))
    with pytest.raises(InputError, match="no model_type"):
        run(model="x", config=str(bad))
    with pytest.raises(InputError, match=r"no config\.json"):
        run(model="x", config=str(tmp_path.parent))


def test_inference_memory_and_gpus():
    llama = run(
        model="llama3-70b", inference=True, batch_size=8, context=8192, gpu="h100-sxm5-80gb"
    )
    served = llama.inference
    # 70.6e9 bf16 weights = 141 GB: at least two 80 GB GPUs, tensor parallel
    assert served["tensor_parallel"] >= 2 and not llama.fits
    # GQA: 2 x 80 layers x 8 KV heads x 128 x 2 bytes = 320 KiB per token
    assert served["kv_cache_bytes_per_token"] == 2 * 80 * 8 * 128 * 2
    small = run(model="llama3-8b", inference=True, batch_size=1, context=4096, gpu="h100-sxm5-80gb")
    assert small.fits and small.inference["tensor_parallel"] == 1
    assert small.inference["decode_tokens_per_s"] < 3350e9 / 16e9  # bounded by reading the weights
    int4 = run(
        model="llama3-8b", inference=True, batch_size=1, context=4096, gpu="l4", weights="int4"
    )
    assert int4.inference["weights_bytes"] < small.inference["weights_bytes"] / 3


def test_inference_says_how_many_sequences_and_how_long_a_context_fit():
    # issue 24: vLLM prints "Maximum concurrency for N tokens per request: X" at start-up;
    # --inference says the same from the memory left after weights, activations and context
    one = run(model="llama3-8b", inference=True, context=8192, gpu="h100-sxm5-80gb")
    served = one.inference
    per_token = served["kv_cache_bytes_per_token"]  # 2 x 32 layers x 8 KV heads x 128 x 2 bytes
    assert per_token == 2 * 32 * 8 * 128 * 2
    room = served["memory_budget_bytes"] - (
        served["memory_per_gpu_bytes"] - served["kv_cache_bytes"]
    )
    assert served["kv_cache_tokens"] == int(room / per_token)
    assert served["max_concurrency"] == round(served["kv_cache_tokens"] / 8192, 2)
    assert served["max_context"] == 8192  # Llama 3's max_position_embeddings caps it
    # twice the context, half the sequences; a bigger card, more of them
    longer = run(model="llama3-8b", inference=True, context=4096, gpu="h100-sxm5-80gb").inference
    # (about twice: a shorter prompt's prefill chunk leaves a little more room)
    assert 2.0 <= longer["max_concurrency"] / served["max_concurrency"] < 2.02
    h200 = run(model="llama3-8b", inference=True, context=8192, gpu="h200-sxm-141gb").inference
    assert h200["max_concurrency"] > 1.5 * served["max_concurrency"]


def test_analytic_inference_names_its_batch_and_weights(capsys):
    # issue 24: "serving batch None ... weights None"
    from rich.console import Console

    from dlrig.fit.render import render_text

    result = run(model="llama3-8b", inference=True, analytic=True, gpu="h100-sxm5-80gb")
    render_text(result, Console(width=120))
    text = capsys.readouterr().out
    assert "None" not in text and "serving batch 1 × context 4096 tokens, weights bf16" in text


def test_gguf_and_exl2_weights_take_their_bits_per_weight():
    # issue 24: GGUF mixes and EXL2 rates; llama.cpp's quantize tool prints the size of each
    # mix for Llama-3-8B (Q4_K_M 4.58G, Q8_0 7.96G), which the table's rows come from
    def weights(fmt: str) -> int:
        result = run(model="llama3-8b", inference=True, gpu="rtx-4090", weights=fmt)
        return result.inference["weights_bytes"]

    assert abs(weights("gguf-q4_k_m") / 2**30 - 4.58) < 0.03
    assert abs(weights("gguf-q8_0") / 2**30 - 7.96) < 0.05
    params = run(model="llama3-8b", inference=True, gpu="rtx-4090").params
    assert weights("exl2-4.65") == int(params * 4.65 / 8)
    for bad in ("exl2-9", "gguf-q9_k", "int3"):
        with pytest.raises(InputError, match="not a weight format"):
            run(model="llama3-8b", inference=True, gpu="rtx-4090", weights=bad)


def test_a_context_past_the_models_positions_is_refused():
    # vLLM refuses a max_model_len above max_position_embeddings; so does --inference
    with pytest.raises(InputError, match="takes at most 1024 positions"):
        run(model="gpt2", inference=True, gpu="t4", context=4096)


def test_inference_gives_the_whole_batchs_rate_with_its_prefill():
    """What a static serving benchmark prints (TensorRT-LLM's and LMDeploy's tables): the
    batch's output tokens over the whole run, prefill included, below the decode-only rate."""
    served = run(
        model="llama3-8b",
        inference=True,
        batch_size=64,
        context=4096,
        seq_len=2048,
        gpu="h100-sxm5-80gb",
    ).inference
    output = served["context"] - served["prompt_tokens"]
    expected = (
        64 * output / (served["time_to_first_token_s"] + output * served["time_per_output_token_s"])
    )
    assert served["end_to_end_output_tokens_per_s"] == pytest.approx(expected)
    assert served["end_to_end_output_tokens_per_s"] < served["decode_tokens_per_s"]


def test_falcon_key_value_heads():
    """Falcon's configs name their key/value heads their own way: 40B/180B (the new decoder
    architecture) num_kv_heads, 7B one shared head (multi_query), RefinedWeb's n_head_kv."""
    from transformers import FalconConfig

    from dlrig.fit.hfconfig import kv_heads

    seven = FalconConfig(hidden_size=4544, num_attention_heads=71, multi_query=True)
    big = FalconConfig(
        hidden_size=14848, num_attention_heads=232, new_decoder_architecture=True, num_kv_heads=8
    )
    assert kv_heads(seven, 71) == 1
    assert kv_heads(big, 232) == 8
    # the same from config.json as --analytic reads it
    assert kv_heads(big.to_dict(), 232) == 8 and kv_heads(seven.to_dict(), 71) == 1

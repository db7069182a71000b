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
    return fit.estimate(**kwargs)


@pytest.mark.parametrize(
    ("name", "billions"),
    # the model cards' parameter counts
    [("qwen2.5-7b-instruct", 7.62), ("qwen3-0.6b", 0.596), ("llama-2-7b-hf", 6.74)],
)
def test_real_configs_trace_to_the_published_size(name, billions):
    result = run(model=name, config=str(CONFIGS / f"{name}.json"), seq_len=512, batch_size=1)
    assert result.method == "trace"
    assert result.params / 1e9 == pytest.approx(billions, rel=0.02)
    analytic = run(model=name, config=str(CONFIGS / f"{name}.json"), analytic=True)
    assert analytic.params == pytest.approx(result.params, rel=0.01)
    assert analytic.method == "analytic"


def test_model_folder_and_hub_cache(tmp_path, monkeypatch):
    folder = tmp_path / "qwen"
    folder.mkdir()
    shutil.copy(CONFIGS / "qwen3-0.6b.json", folder / "config.json")
    from_folder = run(model="qwen", config=str(folder), seq_len=256, batch_size=1)
    # the layout huggingface_hub writes: models--ORG--NAME/{refs/main, snapshots/REV/}
    cache = tmp_path / "hub"
    snapshot = cache / "models--Qwen--Qwen3-0.6B" / "snapshots" / "c1899de"
    snapshot.mkdir(parents=True)
    (cache / "models--Qwen--Qwen3-0.6B" / "refs").mkdir()
    (cache / "models--Qwen--Qwen3-0.6B" / "refs" / "main").write_text("c1899de")
    shutil.copy(CONFIGS / "qwen3-0.6b.json", snapshot / "config.json")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    from_hub = run(model="Qwen/Qwen3-0.6B", seq_len=256, batch_size=1)
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

"""Any model people name: a local config.json (or model folder), or a Hub id already in the cache.

Nothing is downloaded: a Hub id is looked up in the local Hugging Face cache only (as with
HF_HUB_OFFLINE=1), and a model that is not there gets one line saying how to fetch its config.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dlrig.errors import InputError
from dlrig.fit.workload import TEXT_TASKS, Workload, hf_workload, transformers_module
from dlrig.inputs import read_text

_HEADS = (
    ("ForCausalLM", "causal_lm"),
    ("LMHeadModel", "causal_lm"),
    ("ForConditionalGeneration", "seq2seq"),
    ("ForMaskedLM", "masked_lm"),
    ("ForPreTraining", "bert_pretraining"),
    ("ForQuestionAnswering", "question_answering"),
    ("ForSequenceClassification", "sequence_classification"),
    ("ForImageClassification", "image_classification"),
)


def kv_heads(config: Any, heads: int) -> int:
    """Key/value heads of a transformers config (an object or config.json's dict): Llama-style
    `num_key_value_heads`; Falcon's `num_kv_heads` (40B/180B, new_decoder_architecture),
    RefinedWeb's `n_head_kv`, or one shared head (Falcon 7B's and GPT-BigCode's multi_query)."""

    def get(key: str) -> Any:
        return config.get(key) if isinstance(config, dict) else getattr(config, key, None)

    if get("num_key_value_heads"):
        return int(get("num_key_value_heads"))
    if get("new_decoder_architecture"):
        return int(get("num_kv_heads") or heads)
    if get("n_head_kv"):
        return int(get("n_head_kv"))
    if get("multi_query"):
        return 1
    return heads


def read_config(path: str | Path) -> tuple[dict[str, Any], Path]:
    """The parsed config.json of a file or a model folder, and the file it came from."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "config.json"
        if not p.exists():
            raise InputError(
                f"{path}: the folder has no config.json",
                fix="point --config at a model folder with config.json, or at the file itself",
            )
    text = read_text(p, "model config (config.json)", 4 * 1024 * 1024)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})",
            fix="give the model's config.json as published",
        ) from None
    if not isinstance(data, dict) or "model_type" not in data:
        raise InputError(
            f"{p}: not a transformers config (no model_type)",
            fix="give the model's config.json (it names model_type and architectures)",
        )
    return data, p


def _model_class(transformers: Any, data: dict[str, Any], config: Any) -> tuple[Any, str, Any]:
    """(model class, task, config to build it with) from `architectures` or the auto mappings."""
    for name in data.get("architectures") or []:
        cls = getattr(transformers, name, None)
        for suffix, task in _HEADS:
            if cls is not None and name.endswith(suffix):
                if task == "seq2seq" and not getattr(config, "is_encoder_decoder", False):
                    text = getattr(config, "text_config", None)
                    if text is None:
                        break
                    # a vision-language checkpoint: its text model is what trains on tokens
                    causal = transformers.AutoModelForCausalLM._model_mapping.get(type(text))
                    if causal is None:
                        break
                    return causal, "causal_lm", text
                return cls, task, config
    for auto, task in (
        ("AutoModelForCausalLM", "causal_lm"),
        ("AutoModelForSeq2SeqLM", "seq2seq"),
        ("AutoModelForMaskedLM", "masked_lm"),
        ("AutoModelForImageClassification", "image_classification"),
    ):
        mapping = getattr(transformers, auto)._model_mapping
        if type(config) in mapping:
            return mapping[type(config)], task, config
    raise InputError(
        f"model_type {data['model_type']!r}: transformers has no training head dlrig can build for it",
        fix="name a causal-LM, seq2seq, masked-LM or image-classification config",
    )


def _workload(data: dict[str, Any], name: str, source: str, options: Any) -> Workload:
    transformers = transformers_module()
    model_type = data["model_type"]
    try:
        config = transformers.AutoConfig.for_model(
            model_type, **{k: v for k, v in data.items() if k != "model_type"}
        )
    except (ValueError, KeyError) as exc:
        raise InputError(
            f"{name}: transformers {transformers.__version__} cannot read model_type {model_type!r} ({exc})",
            fix="upgrade transformers, or give a config of a supported family",
        ) from None
    model_class, task, config = _model_class(transformers, data, config)
    limit = getattr(config, "max_position_embeddings", None)
    default_seq = min(limit, 2048) if isinstance(limit, int) and task in TEXT_TASKS else 2048
    default_batch = {"image_classification": 32, "masked_lm": 8}.get(task, 1)
    return hf_workload(
        name=name,
        config=config,
        model_class=model_class,
        task=task,
        source=source,
        seq_len=options.seq_len,
        image_size=options.image_size,
        default_batch=default_batch,
        default_seq=None if task == "image_classification" else default_seq,
        attention=options.attention,
    )


def display_name(data: dict[str, Any], file: Path) -> str:
    """A model's name for reports: the Hub id the config was saved from, else the file's name
    (its folder's for a `config.json`), never the path."""
    hub = data.get("_name_or_path")
    if isinstance(hub, str) and hub and "/" in hub and not hub.startswith((".", "/")):
        return hub
    return file.parent.name if file.stem == "config" else file.stem


def config_workload(path: str, options: Any) -> Workload:
    data, file = read_config(path)
    name = (
        options.model if options.model and options.model != str(path) else display_name(data, file)
    )
    return _workload(data, name, f"config {file}", options)


def cache_dir() -> Path:
    """The Hugging Face hub cache, found as huggingface_hub finds it (HF_HUB_CACHE, HF_HOME,
    XDG_CACHE_HOME), without importing it: a cached-config estimate must stay instant."""
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    base = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "huggingface" / "hub"


def cached_config(repo_id: str) -> Path:
    """config.json of `repo_id` in the local cache (models--ORG--NAME/snapshots/REV/), or a
    clear error: dlrig never downloads."""
    root = cache_dir() / ("models--" + repo_id.replace("/", "--"))
    snapshots = root / "snapshots"
    revision = None
    ref = root / "refs" / "main"
    if ref.is_file():
        revision = ref.read_text("utf-8").strip()
    candidates = []
    if revision and (snapshots / revision / "config.json").is_file():
        candidates = [snapshots / revision / "config.json"]
    elif snapshots.is_dir():
        candidates = sorted(
            (p for p in snapshots.glob("*/config.json") if p.is_file()),
            key=lambda p: p.stat().st_mtime,
            reverse=True,
        )
    if not candidates:
        raise InputError(
            f"{repo_id}: its config.json is not in the local Hugging Face cache ({cache_dir()}); dlrig does not download",
            fix=f"fetch it where there is network (`hf download {repo_id} config.json`), or pass --config path/to/config.json",
        )
    return candidates[0]


def hub_workload(repo_id: str, options: Any) -> Workload:
    """A Hub id from the local cache only: never a download."""
    data, file = read_config(cached_config(repo_id))
    return _workload(data, repo_id, f"Hugging Face cache {file}", options)

"""Models to trace: presets built from published configs, or the user's own `module:factory`."""

from __future__ import annotations

import difflib
import functools
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import torch

from dlrig.errors import InputError
from dlrig.inputs import call_factory, load_factory

TASKS = ("image_classification", "causal_lm", "bert_pretraining", "seq2seq", "custom")


@dataclass(frozen=True)
class Preset:
    name: str
    model_class: str
    config_class: str
    task: str
    config: dict[str, Any]
    batch_size: int
    seq_len: int | None
    image_size: int | None
    source: str


@functools.cache
def presets() -> dict[str, Preset]:
    text = (
        resources.files("dlrig.knowledge").joinpath("data", "fit_presets.toml").read_text("utf-8")
    )
    raw = tomllib.loads(text)["preset"]
    return {
        name: Preset(
            name=name,
            model_class=entry["model_class"],
            config_class=entry["config_class"],
            task=entry["task"],
            config=dict(entry["config"]),
            batch_size=int(entry["batch_size"]),
            seq_len=entry.get("seq_len"),
            image_size=entry.get("image_size"),
            source=entry["source"],
        )
        for name, entry in raw.items()
    }


def suggest(name: str) -> list[str]:
    return difflib.get_close_matches(name.lower(), list(presets()), n=3, cutoff=0.4)


@dataclass
class Workload:
    """A model factory plus the batch it is trained on."""

    name: str
    task: str
    build: Callable[[], torch.nn.Module]
    make_inputs: Callable[[int], dict[str, Any]]  # batch size -> model kwargs (fake tensors)
    loss_of: Callable[[Any], torch.Tensor]
    samples_unit: str  # "images" | "sequences" | "samples"
    tokens_per_sample: int | None
    seq_len: int | None
    image_size: int | None
    default_batch: int
    source: str
    positional: bool = False  # custom models: inputs passed in --input order

    def call(self, model: torch.nn.Module, inputs: dict[str, Any]) -> Any:
        return model(*inputs.values()) if self.positional else model(**inputs)


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        from dlrig.errors import MissingExtraError

        raise MissingExtraError("transformers", "torch", "dlrig fit's model presets") from None
    transformers.logging.set_verbosity_error()
    return transformers


def _loss(output: Any) -> torch.Tensor:
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if loss is None:
        tensor = output[0] if isinstance(output, tuple | list) else output
        if not isinstance(tensor, torch.Tensor):
            raise TypeError("the model returned no loss and no tensor to take a loss from")
        loss = tensor.float().mean()
    return loss


def preset_workload(name: str, seq_len: int | None, image_size: int | None) -> Workload:
    table = presets()
    if name not in table:
        close = suggest(name)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise InputError(
            f"unknown model preset {name!r}",
            fix=f"{hint}presets: {', '.join(table)}; or pass package.module:factory with --input",
        )
    preset = table[name]
    transformers = _transformers()
    config_class = getattr(transformers, preset.config_class)
    model_class = getattr(transformers, preset.model_class)
    config_values = dict(preset.config)
    if preset.task == "image_classification":
        size = image_size or preset.image_size or 224
        if "patch_size" in config_values:
            config_values["image_size"] = size
    else:
        size = seq_len or preset.seq_len or 512
        limit_key = next(
            (k for k in ("max_position_embeddings", "n_positions") if k in config_values), None
        )
        if limit_key and size > config_values[limit_key]:
            config_values[limit_key] = size  # positions are a table for BERT/GPT-2: grow it
    config = config_class(**config_values)
    convolutional = preset.task == "image_classification" and "patch_size" not in config_values
    if not convolutional:
        # SDPA where the model supports it (traced with fused-kernel memory); T5 has no SDPA path.
        config._attn_implementation = "sdpa" if preset.task != "seq2seq" else "eager"

    def build() -> torch.nn.Module:
        model = model_class(config)
        # Weight tying (LM head = embeddings) happens at init, which the fake build skips.
        tie = getattr(model, "tie_weights", None)
        if callable(tie):
            tie()
        return model

    vocab = getattr(config, "vocab_size", 1000)

    def make_inputs(batch: int) -> dict[str, Any]:
        if preset.task == "image_classification":
            return {
                "pixel_values": torch.empty(batch, 3, size, size),
                "labels": torch.zeros(batch, dtype=torch.long),
            }
        ids = torch.zeros(batch, size, dtype=torch.long)
        if preset.task == "bert_pretraining":
            return {
                "input_ids": ids,
                "token_type_ids": torch.zeros_like(ids),
                "attention_mask": torch.ones_like(ids),
                "labels": torch.zeros_like(ids),
                "next_sentence_label": torch.zeros(batch, dtype=torch.long),
            }
        if preset.task == "seq2seq":
            return {"input_ids": ids, "labels": torch.zeros_like(ids)}
        return {"input_ids": ids, "labels": ids}

    del vocab
    image = preset.task == "image_classification"
    return Workload(
        name=name,
        task=preset.task,
        build=build,
        make_inputs=make_inputs,
        loss_of=_loss,
        samples_unit="images" if image else "sequences",
        tokens_per_sample=None if image else size,
        seq_len=None if image else size,
        image_size=size if image else None,
        default_batch=preset.batch_size,
        source=preset.source,
    )


_INPUT_SPEC = re.compile(r"^\s*(?P<name>\w+)\s*:\s*(?P<dtype>\w+)\s*\[(?P<dims>[^\]]*)\]\s*$")
_DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "long": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
}


def parse_input_spec(spec: str) -> list[tuple[str, torch.dtype, list[str]]]:
    """ "x:float32[B,3,224,224],y:int64[B]" -> [(name, dtype, dims)]; B is the batch size."""
    parts = []
    for item in re.split(r",(?![^\[]*\])", spec):
        match = _INPUT_SPEC.match(item)
        if not match:
            raise InputError(
                f"--input {item.strip()!r}: not name:dtype[dims]",
                fix="e.g. --input 'pixel_values:float32[B,3,224,224],labels:int64[B]' (B is the batch size)",
            )
        dtype = _DTYPES.get(match.group("dtype"))
        if dtype is None:
            raise InputError(
                f"--input {item.strip()!r}: unknown dtype {match.group('dtype')!r}",
                fix=f"use one of {', '.join(_DTYPES)}",
            )
        dims = [d.strip() for d in match.group("dims").split(",") if d.strip()]
        for dim in dims:
            if dim != "B" and not dim.isdigit():
                raise InputError(
                    f"--input {item.strip()!r}: dimension {dim!r} is not a number or B",
                    fix="use numbers and B",
                )
        parts.append((match.group("name"), dtype, dims))
    if not parts:
        raise InputError(
            "--input is empty", fix="describe the batch, e.g. --input 'x:float32[B,128]'"
        )
    return parts


def custom_workload(target: str, input_spec: str | None) -> Workload:
    if ":" not in target:
        raise InputError(
            f"{target!r}: not a preset and not package.module:factory",
            fix="e.g. mypkg.models:make_model",
        )
    if input_spec is None:
        raise InputError(
            f"{target}: a custom model needs --input",
            fix="e.g. --input 'x:float32[B,3,224,224],y:int64[B]'",
        )
    spec = parse_input_spec(input_spec)
    factory = load_factory(target, "an nn.Module", "mypkg.models:make_model")

    def build() -> torch.nn.Module:
        model = call_factory(target, factory)
        if not isinstance(model, torch.nn.Module):
            raise InputError(
                f"{target}: the factory returned {type(model).__name__}, not a torch.nn.Module",
                fix="return the model",
            )
        # Keyword inputs when the forward names them all, else positional in --input order.
        import inspect

        names = set(inspect.signature(model.forward).parameters)
        workload.positional = not all(name in names for name, _, _ in spec)
        return model

    def make_inputs(batch: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, dtype, dims in spec:
            shape = [batch if d == "B" else int(d) for d in dims]
            out[name] = (
                torch.zeros(shape, dtype=dtype)
                if not dtype.is_floating_point
                else torch.empty(shape, dtype=dtype)
            )
        return out

    workload = Workload(
        name=target,
        task="custom",
        build=build,
        make_inputs=make_inputs,
        loss_of=_loss,
        samples_unit="samples",
        tokens_per_sample=None,
        seq_len=None,
        image_size=None,
        default_batch=8,
        source=f"user factory {target}",
        positional=True,
    )
    return workload

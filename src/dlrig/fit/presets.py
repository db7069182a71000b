"""Model presets (published configs, in knowledge/data/fit_presets.toml) and `module:factory` models."""

from __future__ import annotations

import difflib
import functools
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from dlrig.errors import InputError
from dlrig.fit.workload import Workload, hf_workload, loss_of, transformers_module
from dlrig.inputs import call_factory, load_factory

if TYPE_CHECKING:
    import torch


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


def preset_workload(
    name: str, seq_len: int | None, image_size: int | None, attention: str = "sdpa"
) -> Workload:
    table = presets()
    if name not in table:
        close = suggest(name)
        hint = f"did you mean {', '.join(close)}? " if close else ""
        raise InputError(
            f"unknown model {name!r}: not a preset, a Hub id (org/name) or module:factory",
            fix=f"{hint}presets: {', '.join(table)}; or --config path/to/config.json",
        )
    preset = table[name]
    transformers = transformers_module()
    config_class = getattr(transformers, preset.config_class)
    model_class = getattr(transformers, preset.model_class)
    return hf_workload(
        name=name,
        config=config_class(**preset.config),
        model_class=model_class,
        task=preset.task,
        source=preset.source,
        seq_len=seq_len,
        image_size=image_size,
        default_batch=preset.batch_size,
        default_seq=preset.seq_len,
        attention=attention,
    )


_INPUT_SPEC = re.compile(r"^\s*(?P<name>\w+)\s*:\s*(?P<dtype>\w+)\s*\[(?P<dims>[^\]]*)\]\s*$")
_DTYPE_NAMES = {
    "float32": "float32",
    "float": "float32",
    "float16": "float16",
    "half": "float16",
    "bfloat16": "bfloat16",
    "int64": "int64",
    "long": "int64",
    "int32": "int32",
    "bool": "bool",
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
        import torch

        dtype_name = _DTYPE_NAMES.get(match.group("dtype"))
        if dtype_name is None:
            raise InputError(
                f"--input {item.strip()!r}: unknown dtype {match.group('dtype')!r}",
                fix=f"use one of {', '.join(_DTYPE_NAMES)}",
            )
        dtype = getattr(torch, dtype_name)
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

    import torch

    def build(depth: int | None = None) -> torch.nn.Module:
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
        loss_of=loss_of,
        samples_unit="samples",
        tokens_per_sample=None,
        seq_len=None,
        image_size=None,
        default_batch=8,
        source=f"user factory {target}",
        positional=True,
    )
    return workload

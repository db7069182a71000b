"""Workloads: what `fit` traces, plus how much work one run is and how often it runs.

Compact syntax, one workload per argument:

    MODEL[:KEY=VALUE,KEY=VALUE...]
    resnet50:epochs=90,dataset=1281167,precision=amp-bf16,every=month
    bert-large:batch=32,seq=128,tokens=3.3B,runs=4
    mypkg.models:make_model:input=x:float32[B,3,224,224],y:int64[B],dataset=50k

MODEL is a fit preset, a `package.module:factory`, or a config.json path. Keys: name, batch
(per GPU), global_batch, seq, image, precision, optimizer, strategy, checkpointing, compile
(none, model or blocks: fit --compile), fp8 (true: Float8 matmuls, fit --fp8; GPUs without FP8
are refused), lora or qlora (the adapter rank), input, epochs, dataset (samples), tokens, runs
(per year) or every (day/week/month/quarter/year/Nd/Nw),
deadline (24h, 3d, 90m; a bare number is hours). Numbers take k, M, B/G and T suffixes.

A YAML file (`dlrig plan workloads.yaml`) holds the same keys under `workloads:` (a list), and
may hold `constraints:` with the option names of `dlrig plan` (budget, deadline, circuit, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from dlrig.errors import InputError
from dlrig.extras import require
from dlrig.fit.options import (
    CHECKPOINTING,
    COMPILES,
    OPTIMIZERS,
    Checkpointing,
    Compile,
    Optimizer,
    Precision,
    Strategy,
)
from dlrig.plain import word

KEYS = (
    "name",
    "batch",
    "global_batch",
    "seq",
    "image",
    "precision",
    "optimizer",
    "strategy",
    "checkpointing",
    "compile",
    "fp8",
    "lora",
    "qlora",
    "input",
    "epochs",
    "dataset",
    "tokens",
    "runs",
    "every",
    "deadline",
)
# YAML files may use the long names too.
ALIASES = {
    "model": "model",
    "batch_size": "batch",
    "seq_len": "seq",
    "image_size": "image",
    "grad_checkpointing": "checkpointing",
    "dataset_size": "dataset",
    "runs_per_year": "runs",
    "deadline_hours": "deadline",
    "input_spec": "input",
}
PRECISIONS: tuple[Precision, ...] = ("auto", "fp32", "tf32", "amp-fp16", "amp-bf16", "bf16")
STRATEGIES: tuple[Strategy | Literal["auto"], ...] = (
    "auto",
    "ddp",
    "zero1",
    "zero2",
    "zero3",
    "fsdp",
    "hsdp",
    "fsdp-grad-op",
)
Word = TypeVar("Word", bound=str)
EVERY = {"day": 365.0, "week": 52.0, "month": 12.0, "quarter": 4.0, "year": 1.0}
SUFFIX = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
DEFAULT_RUNS_PER_YEAR = 12.0


@dataclass(frozen=True)
class Workload:
    name: str
    model: str
    batch_size: int | None = None
    global_batch: int | None = None
    seq_len: int | None = None
    image_size: int | None = None
    precision: Precision = "auto"  # auto: bf16 where the GPU has it, else fp16 (fit's choice)
    optimizer: Optimizer = "adamw"
    strategy: Strategy | Literal["auto"] = "auto"  # auto: ddp, fsdp when ddp does not fit
    grad_checkpointing: Checkpointing = "none"
    compile: Compile = "none"  # fit --compile
    fp8: bool = False  # fit --fp8 (an evaluation setting: the trace is the bf16 one)
    lora: int | None = None  # LoRA rank (fit --lora)
    qlora: int | None = None  # QLoRA rank (fit --qlora)
    input_spec: str | None = None
    epochs: float = 1.0
    dataset_size: int | None = None
    tokens: float | None = None
    runs_per_year: float = DEFAULT_RUNS_PER_YEAR
    runs_given: bool = False
    deadline_hours: float | None = None

    @property
    def sized(self) -> bool:
        """Whether one run has a size (time per run needs dataset x epochs or tokens)."""
        return bool(self.dataset_size or self.tokens)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "batch_size": self.batch_size,
            "global_batch": self.global_batch,
            "seq_len": self.seq_len,
            "image_size": self.image_size,
            "precision": self.precision,
            "optimizer": self.optimizer,
            "strategy": self.strategy,
            "grad_checkpointing": self.grad_checkpointing,
            "compile": self.compile,
            "fp8": self.fp8,
            "lora": self.lora,
            "qlora": self.qlora,
            "epochs": self.epochs,
            "dataset_size": self.dataset_size,
            "tokens": self.tokens,
            "runs_per_year": self.runs_per_year,
            "runs_per_year_given": self.runs_given,
            "deadline_hours": self.deadline_hours,
        }


def number(text: str, what: str) -> float:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*([kmbgt]?)\s*", text.lower())
    if not match:
        raise InputError(f"{what}={text!r} is not a number", fix=f"e.g. {what}=1.28M or {what}=90")
    return float(match.group(1)) * SUFFIX.get(match.group(2), 1.0)


def hours(text: str, what: str) -> float:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(m|min|h|d|w)?\s*", text.lower())
    if not match:
        raise InputError(
            f"{what}={text!r} is not a duration", fix=f"e.g. {what}=48h, {what}=3d or {what}=90m"
        )
    scale = {"m": 1 / 60, "min": 1 / 60, "h": 1.0, "d": 24.0, "w": 168.0}.get(
        match.group(2) or "h", 1.0
    )
    value = float(match.group(1)) * scale
    if value <= 0:
        raise InputError(f"{what}={text!r} is not positive", fix=f"give a positive {what}")
    return value


def _runs(text: str) -> float:
    spelled = text.lower().strip()
    if spelled in EVERY:
        return EVERY[spelled]
    match = re.fullmatch(r"([0-9]*\.?[0-9]+)\s*(d|w)", spelled)
    if match:
        days = float(match.group(1)) * (7.0 if match.group(2) == "w" else 1.0)
        if days > 0:
            return 365.0 / days
    raise InputError(
        f"every={text!r}", fix="every=day|week|month|quarter|year or every=10d / every=2w"
    )


def _split_options(text: str) -> list[str]:
    """Split on commas outside brackets; a piece without `=` continues the previous value
    (`input=x:float32[B,3],y:int64[B]` keeps its comma)."""
    pieces, depth, current = [], 0, ""
    for char in text:
        depth += char in "[("
        depth -= char in "])"
        if char == "," and depth == 0:
            pieces.append(current)
            current = ""
        else:
            current += char
    pieces.append(current)
    merged: list[str] = []
    for piece in pieces:
        key = piece.split("=", 1)[0].strip()
        if "=" in piece and key in KEYS:
            merged.append(piece)
        elif merged:
            merged[-1] += "," + piece
        else:
            merged.append(piece)
    return merged


def parse(text: str) -> Workload:
    """One compact workload argument."""
    model, options = text, ""
    for match in re.finditer(":", text):
        # Options start at the first `:name=`; a factory name (`pkg.mod:factory`) has no `=`.
        rest = text[match.end() :]
        if re.match(r"[A-Za-z_][A-Za-z0-9_]*=", rest):
            model, options = text[: match.start()], rest
            break
    if not model:
        raise InputError(
            f"workload {text!r} has no model", fix="e.g. resnet50:epochs=90,dataset=1.28M"
        )
    values: dict[str, str] = {}
    for piece in _split_options(options) if options else []:
        key, sep, value = piece.partition("=")
        key = key.strip()
        if not sep or key not in KEYS:
            raise InputError(
                f"workload {text!r}: {piece!r} is not KEY=VALUE with a known key",
                fix="keys: " + ", ".join(KEYS),
            )
        values[key] = value.strip()
    return build(model, values, f"workload {text!r}")


def build(model: str, values: dict[str, str], where: str) -> Workload:
    def integer(key: str) -> int | None:
        if key not in values:
            return None
        value = number(values[key], key)
        if value < 1 or value != int(value):
            raise InputError(
                f"{where}: {key}={values[key]} is not a whole number >= 1",
                fix=f"give {key} as a positive integer",
            )
        return int(value)

    def choice(key: str, allowed: tuple[Word, ...], default: Word) -> Word:
        value = values.get(key, default)
        try:
            return word(allowed, value, key)
        except ValueError:
            raise InputError(
                f"{where}: {key}={value!r}", fix=f"one of {', '.join(allowed)}"
            ) from None

    if "runs" in values and "every" in values:
        raise InputError(f"{where}: both runs= and every=", fix="keep one of them")
    runs = DEFAULT_RUNS_PER_YEAR
    if "runs" in values:
        runs = number(values["runs"], "runs")
    elif "every" in values:
        runs = _runs(values["every"])
    if runs <= 0:
        raise InputError(
            f"{where}: runs={values.get('runs')}", fix="give a positive number of runs per year"
        )
    if "lora" in values and "qlora" in values:
        raise InputError(f"{where}: both lora= and qlora=", fix="keep one of them")
    precision = choice("precision", PRECISIONS, "auto")  # known before fp8 is checked against it
    fp8 = _flag(values.get("fp8", "false"), f"{where}: fp8")
    if fp8 and ("lora" in values or "qlora" in values):
        raise InputError(
            f"{where}: fp8=true with an adapter (fit refuses --fp8 with --lora/--qlora: the "
            "frozen base is not what Float8 training converts)",
            fix="drop fp8=, or drop lora=/qlora=",
        )
    if fp8 and precision not in ("auto", "amp-bf16", "bf16"):
        raise InputError(
            f"{where}: fp8=true with precision={precision} (Float8 trains the other "
            "layers in bf16)",
            fix="use precision=amp-bf16 (or bf16), or drop fp8=",
        )
    epochs = number(values["epochs"], "epochs") if "epochs" in values else 1.0
    tokens = number(values["tokens"], "tokens") if "tokens" in values else None
    return Workload(
        name=values.get("name") or model,
        model=model,
        batch_size=integer("batch"),
        global_batch=integer("global_batch"),
        seq_len=integer("seq"),
        image_size=integer("image"),
        precision=precision,
        optimizer=choice("optimizer", OPTIMIZERS, "adamw"),
        strategy=choice("strategy", STRATEGIES, "auto"),
        grad_checkpointing=choice("checkpointing", CHECKPOINTING, "none"),
        compile=choice("compile", COMPILES, "none"),
        fp8=fp8,
        lora=integer("lora"),
        qlora=integer("qlora"),
        input_spec=values.get("input"),
        epochs=epochs,
        dataset_size=integer("dataset"),
        tokens=tokens,
        runs_per_year=runs,
        runs_given="runs" in values or "every" in values,
        deadline_hours=hours(values["deadline"], "deadline") if "deadline" in values else None,
    )


def _flag(value: object, where: str) -> bool:
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise InputError(f"{where}={value!r}", fix="give true or false")


def load_file(path: str | Path) -> tuple[list[Workload], dict[str, Any]]:
    """Workloads and constraints from a YAML file."""
    yaml = require("yaml", "plan", "reading workload files", package="pyyaml")
    where = Path(path)
    try:
        data = yaml.safe_load(where.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(
            f"{where}: cannot read ({exc.strerror})", fix="give a readable YAML file"
        ) from None
    except yaml.YAMLError:
        raise InputError(f"{where}: not valid YAML", fix="fix the YAML syntax") from None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("workloads"), list)
        or not data["workloads"]
    ):
        raise InputError(
            f"{where}: no `workloads:` list",
            fix="write `workloads:` then `- {model: resnet50, epochs: 90, dataset: 1281167}`",
        )
    unknown = sorted(set(data) - {"workloads", "constraints"})
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r}", fix="keys: workloads, constraints")
    workloads = []
    for index, entry in enumerate(data["workloads"], start=1):
        if not isinstance(entry, dict) or "model" not in entry:
            raise InputError(
                f"{where}: workload {index} has no `model`", fix="each entry needs `model: PRESET`"
            )
        values: dict[str, str] = {}
        for key, value in entry.items():
            name = ALIASES.get(str(key), str(key))
            if name == "model":
                continue
            if name not in KEYS:
                raise InputError(
                    f"{where}: workload {index}: unknown key {key!r}",
                    fix="keys: model, " + ", ".join(KEYS),
                )
            values[name] = str(value)
        workloads.append(build(str(entry["model"]), values, f"{where}: workload {index}"))
    constraints = data.get("constraints") or {}
    if not isinstance(constraints, dict):
        raise InputError(
            f"{where}: `constraints` must be a mapping", fix="write `constraints: {budget: 50000}`"
        )
    return workloads, {str(k).replace("-", "_"): v for k, v in constraints.items()}


def from_arguments(arguments: tuple[str, ...] | list[str]) -> tuple[list[Workload], dict[str, Any]]:
    workloads: list[Workload] = []
    constraints: dict[str, Any] = {}
    for argument in arguments:
        if argument.endswith((".yaml", ".yml")):
            more, given = load_file(argument)
            workloads += more
            constraints.update(given)
        else:
            workloads.append(parse(argument))
    names = [w.name for w in workloads]
    for index, name in enumerate(names):
        if names.count(name) > 1:
            workloads[index] = replace(
                workloads[index], name=f"{name}#{names[: index + 1].count(name)}"
            )
    return workloads, constraints

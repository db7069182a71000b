"""A workload: a model that can be built (at any depth), its batch, and how to take its loss.

Transformers models are built from their config with no weights. Their layers repeat, so a
workload also says how many there are (`layers`) and the period of their pattern (`period`,
e.g. Gemma's alternating local/global attention): the trace runs a model of 2 and 3 periods and
extrapolates to the full depth, exactly for anything affine in the layer count.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from dlrig.errors import InputError, MissingExtraError

TEXT_TASKS = (
    "causal_lm",
    "masked_lm",
    "bert_pretraining",
    "question_answering",
    "sequence_classification",
    "seq2seq",
)
TASKS = ("image_classification", *TEXT_TASKS, "custom")


@dataclass
class Workload:
    """A model factory plus the batch it is trained on."""

    name: str
    task: str
    build: Callable[[int | None], Any]  # depth (None = full) -> nn.Module
    make_inputs: Callable[[int], dict[str, Any]]  # batch size -> model kwargs (fake tensors)
    loss_of: Callable[[Any], Any]
    samples_unit: Literal["images", "sequences", "samples"]
    tokens_per_sample: int | None
    seq_len: int | None
    image_size: int | None
    default_batch: int
    source: str
    positional: bool = False  # custom models: inputs passed in --input order
    layers: int | None = None  # repeated blocks a depth-reduced trace can extrapolate over
    period: int = 1
    config: Any = None  # the transformers config, when there is one
    model_type: str | None = None
    notes: list[str] = field(default_factory=list)
    checkpoint_dtype: str | None = (
        None  # the config's torch_dtype: how the checkpoint stores weights
    )

    # torchtune's CEWithChunkedOutputLoss: the output projection in this many chunks of the
    # sequence, each upcast to fp32 for its own cross-entropy (0: the model's own loss)
    loss_chunks: int = 0

    def call(self, model: Any, inputs: dict[str, Any]) -> Any:
        if self.loss_chunks:
            return chunked_loss(model, inputs, self.loss_chunks)
        return model(*inputs.values()) if self.positional else model(**inputs)


def chunked_loss(model: Any, inputs: dict[str, Any], chunks: int) -> dict[str, Any]:
    """Cross-entropy as torchtune computes it with CEWithChunkedOutputLoss: the decoder's
    hidden states split along the sequence, every chunk's logits made by the output layer
    (all of them, as torchtune's model returns the list), then each chunk upcast to fp32 and
    its summed cross-entropy added. A peft model is entered through its base model, whose
    layers carry the adapters."""
    import torch.nn.functional as F

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    ids = inputs["input_ids"]
    hidden = base.get_decoder()(input_ids=ids).last_hidden_state
    head = base.get_output_embeddings()
    logits = [head(part) for part in hidden.chunk(chunks, dim=1)]
    total = None
    for part, labels in zip(logits, ids.chunk(chunks, dim=1), strict=True):
        loss = F.cross_entropy(part.float().flatten(0, 1), labels.flatten(), reduction="sum")
        total = loss if total is None else total + loss
    assert total is not None
    return {"loss": total / ids.numel()}


def transformers_module() -> Any:
    try:
        import transformers
    except ImportError:
        raise MissingExtraError("transformers", "torch", "dlrig fit's models") from None
    transformers.logging.set_verbosity_error()
    return transformers


def loss_of(output: Any) -> Any:
    loss = getattr(output, "loss", None)
    if loss is None and isinstance(output, dict):
        loss = output.get("loss")
    if loss is None:
        import torch

        tensor = output[0] if isinstance(output, tuple | list) else output
        if not isinstance(tensor, torch.Tensor):
            raise TypeError("the model returned no loss and no tensor to take a loss from")
        loss = tensor.float().mean()
    return loss


def _layer_pattern(config: Any) -> tuple[int | None, int]:
    """(repeated layers, pattern period) or (None, 1) when depth cannot be reduced safely."""
    layers = getattr(config, "num_hidden_layers", None)
    if not isinstance(layers, int) or layers < 1:
        return None, 1
    decoder = getattr(config, "num_decoder_layers", None)
    if decoder is not None and decoder != layers:
        return None, 1  # encoder and decoder of different depths: not one affine stack
    kinds = getattr(config, "layer_types", None)
    period = 1
    if isinstance(kinds, list | tuple) and kinds:
        for candidate in range(1, len(kinds) + 1):
            if all(kinds[i] == kinds[i % candidate] for i in range(len(kinds))):
                period = candidate
                break
    if layers < 3 * period + 1:
        return None, 1  # too shallow to gain anything
    return layers, period


def checkpoint_dtype(config: Any) -> str | None:
    """The weights' dtype a config states (`dtype`, formerly `torch_dtype`), as a name."""
    value = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if value is None:
        return None
    return str(value).removeprefix("torch.")


def with_depth(config: Any, depth: int) -> Any:
    reduced = copy.deepcopy(config)
    reduced.num_hidden_layers = depth
    if getattr(reduced, "num_decoder_layers", None) is not None:
        reduced.num_decoder_layers = depth
    kinds = getattr(reduced, "layer_types", None)
    if isinstance(kinds, list | tuple) and kinds:
        reduced.layer_types = list(kinds[:depth])
    return reduced


def _position_limit(config: Any) -> int | None:
    """Positions a model has a learned table for (GPT-2, BERT); None for rotary/relative ones."""
    limit = getattr(config, "max_position_embeddings", None)
    kind = getattr(config, "position_embedding_type", None)
    rope = any(
        getattr(config, key, None) is not None
        for key in ("rope_theta", "rope_parameters", "rope_scaling", "rotary_dim", "rotary_pct")
    )
    if isinstance(limit, int) and (kind == "absolute" or (kind is None and not rope)):
        return limit
    return None


def hf_workload(
    name: str,
    config: Any,
    model_class: Any,
    task: str,
    source: str,
    seq_len: int | None,
    image_size: int | None,
    default_batch: int,
    default_seq: int | None,
    attention: str = "sdpa",
) -> Workload:
    """A workload for a transformers model class built from `config` (a transformers config).

    `attention`: "sdpa" (the fused kernels, as transformers picks by default) or "eager"
    (matmul, softmax and dropout over the S×S scores, saved for backward: what models without
    SDPA and trainers with their own unfused attention run)."""
    import torch

    image = task == "image_classification"
    convolutional = image and getattr(config, "patch_size", None) is None
    if image and seq_len is not None:
        raise InputError(
            f"--seq-len does not apply to {name}: it is an image model",
            fix="drop --seq-len (use --image-size for the input resolution)",
        )
    if not image and image_size is not None:
        raise InputError(
            f"--image-size does not apply to {name}: it is a language model",
            fix="drop --image-size (use --seq-len for the sequence length)",
        )
    config = copy.deepcopy(config)
    if image:
        size = image_size or getattr(config, "image_size", None) or 224
        patch = getattr(config, "patch_size", None)
        if isinstance(patch, int) and size % patch:
            raise InputError(
                f"--image-size {size}: {name} cuts images into {patch}-pixel patches",
                fix=f"use a multiple of {patch}, e.g. {size - size % patch or patch}",
            )
        if patch is not None:
            config.image_size = size
    else:
        if task == "sequence_classification" and getattr(config, "pad_token_id", 0) is None:
            # decoder classifiers pool the last non-pad token and refuse batches > 1 without one
            config.pad_token_id = 0
        size = seq_len or default_seq or 512
        limit = _position_limit(config)
        if limit is not None and size > limit:
            raise InputError(
                f"--seq-len {size}: {name} has learned position embeddings for {limit} positions only",
                fix=f"use --seq-len {limit} or less (models with rotary positions can go longer)",
            )
    notes: list[str] = []
    if not convolutional and attention == "eager":
        config._attn_implementation = "eager"
        notes.append("eager attention (--attention eager): the S×S scores are materialised")
    elif not convolutional and task != "seq2seq" and getattr(model_class, "_supports_sdpa", True):
        # SDPA where the model supports it (traced with fused-kernel memory)
        config._attn_implementation = "sdpa"
    elif not convolutional:
        # T5 has no SDPA path; Gemma 2's logit soft-capping has none either: transformers runs
        # them eagerly, and so does the trace (the S×S scores are kept for backward)
        config._attn_implementation = "eager"
        notes.append(
            f"{model_class.__name__} has no SDPA attention in transformers: traced with eager "
            "attention (S×S scores saved for backward), as transformers runs it"
        )
    layers, period = _layer_pattern(config)

    def build(depth: int | None = None) -> Any:
        model = model_class(config if depth is None else with_depth(config, depth))
        tie = getattr(model, "tie_weights", None)  # tying happens at init, which is skipped
        if callable(tie):
            tie()
        return model

    def make_inputs(batch: int) -> dict[str, Any]:
        if image:
            return {
                "pixel_values": torch.empty(batch, 3, size, size),
                "labels": torch.zeros(batch, dtype=torch.long),
            }
        ids = torch.zeros(batch, size, dtype=torch.long)
        if task == "question_answering":  # SQuAD: answer start and end positions per sequence
            return {
                "input_ids": ids,
                "token_type_ids": torch.zeros_like(ids),
                "attention_mask": torch.ones_like(ids),
                "start_positions": torch.zeros(batch, dtype=torch.long),
                "end_positions": torch.zeros(batch, dtype=torch.long),
            }
        if task == "sequence_classification":  # one label per sequence (GLUE-style)
            inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
            if getattr(config, "type_vocab_size", 0):
                inputs["token_type_ids"] = torch.zeros_like(ids)
            return {**inputs, "labels": torch.zeros(batch, dtype=torch.long)}
        if task == "bert_pretraining":
            return {
                "input_ids": ids,
                "token_type_ids": torch.zeros_like(ids),
                "attention_mask": torch.ones_like(ids),
                "labels": torch.zeros_like(ids),
                "next_sentence_label": torch.zeros(batch, dtype=torch.long),
            }
        return {"input_ids": ids, "labels": torch.zeros_like(ids) if task != "causal_lm" else ids}

    return Workload(
        name=name,
        task=task,
        build=build,
        make_inputs=make_inputs,
        loss_of=loss_of,
        samples_unit="images" if image else "sequences",
        tokens_per_sample=None if image else size,
        seq_len=None if image else size,
        image_size=size if image else None,
        default_batch=default_batch,
        source=source,
        layers=layers,
        period=period,
        config=config,
        model_type=getattr(config, "model_type", None),
        notes=notes,
        checkpoint_dtype=checkpoint_dtype(config),
    )

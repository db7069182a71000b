"""Fixes for tensors a layer cannot take (shapes, dtypes) and for what json, ONNX Runtime and
Keras refuse, from the sizes and names the message gives."""

from __future__ import annotations

import math
import re

from dlrig.diagnose.advice.figures import DOUBT
from dlrig.knowledge import model_dimensions
from dlrig.machine.model import Machine

# Keras's own classes, and the keys of a model configuration that Keras 2.2 reads as a layer's
# class name when the file was written by a later release: naming one of these, the file and
# the loader disagree about the format, not about a custom class.
_KERAS_BUILTINS = frozenset(
    {"name", "layers", "Functional", "Sequential", "Model", "InputLayer", "TFOpLambda"}
    | {"SlicingOpLambda", "Dense", "Conv2D", "Dropout", "Flatten", "Activation"}
)
_FLOATS = {"half": "float16", "float": "float32", "double": "float64", "bfloat16": "bfloat16"}


def _dims(text: str) -> list[int]:
    return [int(part) for part in text.strip("[]() ").replace(" ", "").split(",") if part.isdigit()]


def layer_input(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """A Linear layer's features (the message gives the rows) or a convolution's channels and
    rank; Keras's message says it all in its own words."""
    if groups.get("rows"):
        return _linear(groups)
    if groups.get("size_a") or groups.get("size_a2"):
        return _sizes(groups, facts)
    if groups.get("input") or groups.get("expected_rank"):
        return _conv(groups)
    return {}


def _linear(groups: dict[str, str]) -> dict[str, str]:
    got, expected = groups.get("got", ""), groups.get("expected", "")
    if not (got.isdigit() and expected.isdigit()):
        return {}
    advice = (
        f"The layer was built for {expected} input features and gets {got}: feed data of the "
        "size the model was designed for (a classifier head's in_features is computed for one "
        "image size and backbone), or set the layer's in_features to "
        f"{got} (nn.LazyLinear infers it) and train it again."
    )
    widths = model_dimensions.hidden_widths()
    got_n, expected_n = int(got), int(expected)
    # two encoders' widths, one of them no power of two (768, 1280, 1152: CNNs and MLPs are
    # built with 512, 1024, 2048 as well): a component of another model, more than data
    if (
        got_n in widths
        and expected_n in widths
        and not (_power_of_two(got_n) and _power_of_two(expected_n))
    ):
        advice = (
            f"{got} ({model_dimensions.models_of(got_n)}) and {expected} "
            f"({model_dimensions.models_of(expected_n)}) are models' embedding widths: where a "
            "pipeline joins models, the features come from another model than the layer was "
            "built for: load the parts made for one base model (the text encoder, CLIP vision "
            "model, adapter or LoRA for that model family), or the projector for this encoder. "
            "Otherwise, feed data of the size the model was designed for."
        )
    rows = groups.get("rows", "")
    # the batch flattened into one row: the row holds a whole number of samples' features
    if rows == "1" and int(got) > int(expected) and int(got) % int(expected) == 0:
        advice += (
            " One row holding all the features: the flatten took the batch axis too (use "
            "x.flatten(1) or x.view(x.size(0), -1), not x.view(-1))."
        )
    return {"linear_advice": advice}


def _power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _sizes(groups: dict[str, str], facts: dict[str, str]) -> dict[str, str]:
    a = groups.get("size_a") or groups.get("size_a2") or ""
    b = groups.get("size_b") or groups.get("size_b2") or ""
    if not (a.isdigit() and b.isdigit()):
        return {}
    small, large = sorted((int(a), int(b)))
    dim = groups.get("dim", "")
    out = {"size_a": a, "size_b": b}
    # torchvision's Normalize on an RGBA picture: the image (4 channels) is tensor a, the 3
    # means tensor b, on axis 0 of the unbatched C, H, W tensor
    normalize_rgba = (a, b, dim) == ("4", "3", "0")
    if (small, large) in ((3, 4), (1, 3)) and (facts.get("image_evidence") or normalize_rgba):
        out["sizes_note"] = ": a channel count"
        out["sizes_advice"] = _channel_hint(3, 4 if large == 4 else 1)
    elif (
        small in model_dimensions.max_positions()
        and dim == "1"
        and large > small
        # a token count, not a channel count (512 against 1024 channels is a layer's width)
        and not _power_of_two(large)
    ):
        out["sizes_note"] = f": {small} is a model's maximum sequence length"
        out["sizes_advice"] = (
            f"The input is longer ({large}) than the position embeddings of the model ({small}: "
            f"{model_dimensions.models_of(small, 'max_positions')}): truncate it (tokenizer(..., "
            f"truncation=True, max_length={small})), or split it into chunks."
        )
    elif (
        small >= 16
        and large - small <= max(2, small // 50)
        and dim not in ("0", "1")
        # 1024 against 1025 is a sequence and its mask more often than a picture's side
        and not _power_of_two(small)
    ):
        out["sizes_note"] = ": a spatial size off by a few"
        out["sizes_advice"] = (
            f"{large} against {small} on a spatial axis is an input whose height or width is "
            "not a multiple of the network's total downsampling, so an upsampled feature map "
            "and its skip connection differ: resize or pad inputs to a multiple of 32 (or of "
            "2 to the number of downsamplings), or crop the larger map before adding or "
            "concatenating."
        )
    else:
        out["sizes_note"] = f" (axis {dim})" if dim else " (in a concatenation)"
        out["sizes_advice"] = (
            "Make the input the size the model and its preprocessing expect (the image size, "
            "the number of channels, the sequence length it was configured for)."
        )
        out[DOUBT] = "the sizes alone do not say which of the two tensors is not as expected"
    return out


def _channel_hint(expected: int, got: int) -> str:
    if expected == 3 and got == 4:
        return "4 channels where the layer takes 3 is an image with an alpha channel (an RGBA PNG): open it with Image.open(p).convert('RGB')."
    if expected == 3 and got == 1:
        return "One channel where the layer takes 3 is a grayscale image: .convert('RGB'), or x.expand(-1, 3, -1, -1) on the tensor."
    if expected == 1 and got in (3, 4):
        return f"{got} channels where the layer takes one: convert the images to grayscale (.convert('L')) or build the first layer with in_channels={got}."
    return (
        f"The layer takes {expected} channels and gets {got}: the tensor reaching it is not the "
        "one it was built for (another backbone's features, a concatenation of another width), "
        f"or the first layer's in_channels is not the data's ({got})."
    )


def _conv(groups: dict[str, str]) -> dict[str, str]:
    shape = _dims(groups.get("input", ""))
    got, expected = groups.get("got", ""), groups.get("expected", "")
    if got.isdigit() and expected.isdigit():
        note = f": it takes {expected} channels (axis 1) and got {got}"
        if len(shape) == 4 and shape[-1] == int(expected) and shape[1] != int(expected):
            advice = (
                f"The input is channels-last ([{groups['input']}]): PyTorch convolutions take "
                "N, C, H, W, so permute it: x.permute(0, 3, 1, 2) (ToTensor() does this for "
                "images; arrays from NumPy or OpenCV are H, W, C)."
            )
        else:
            advice = _channel_hint(int(expected), int(got))
        return {"conv_note": note, "conv_advice": advice}
    expected_rank, got_rank = groups.get("expected_rank", ""), groups.get("got_rank", "")
    rank = len(shape) if shape else (int(got_rank) if got_rank.isdigit() else 0)
    if not (expected_rank.isdigit() and rank):
        return {}
    want = int(expected_rank) + (1 if groups.get("op") else 0)  # "3D (unbatched) or 4D (batched)"
    note = f": {rank} dimensions where the layer takes {want}"
    if rank < want:
        advice = (
            "The batch axis is missing: add it for one sample (x.unsqueeze(0), or "
            "x[None]); a DataLoader adds it for batches."
        )
    else:
        advice = (
            "There is an axis too many: a batch of batches or a stray axis (a video's frames, "
            "a channel added twice); remove it (x.squeeze(1), or reshape N*T, C, H, W)."
        )
    return {"conv_note": note, "conv_advice": advice}


def _dtype(name: str) -> str:
    bare = name.removeprefix("c10::").removeprefix("torch.").lower()
    return _FLOATS.get(bare, bare)


def dtype(groups: dict[str, str], facts: dict[str, str], machine: Machine | None) -> dict[str, str]:
    pair = {_dtype(groups.get("dtype_a", "")), _dtype(groups.get("dtype_b", ""))}
    if "float64" in pair:
        advice = (
            "One side is float64: NumPy arrays and Python floats become float64 tensors. Convert "
            "the data where it is made (torch.from_numpy(a).float(), np.float32 arrays, "
            "torch.tensor(..., dtype=torch.float32)), the targets of a loss included."
        )
    elif pair & {"float16", "bfloat16"}:
        advice = (
            "A half-precision tensor meets a float32 one: run the forward under "
            "torch.autocast(device_type='cuda', dtype=torch.float16) (or bfloat16), or give the "
            "inputs the model's dtype (x.to(next(model.parameters()).dtype)); a model loaded "
            "with torch_dtype=float16 needs inputs cast likewise, and a layer you added to it "
            "needs .to(model.dtype)."
        )
    else:
        return {}
    return {"dtype_advice": advice}


def onnx(groups: dict[str, str], facts: dict[str, str], machine: Machine | None) -> dict[str, str]:
    name = groups.get("input", "") or "the input"
    index, got, expected = (
        groups.get("index", ""),
        groups.get("got", ""),
        groups.get("expected", ""),
    )
    if index and got and expected:
        return {
            "onnx_note": f": {name}'s axis {index} is fixed at {expected} and the input has {got}",
            "onnx_advice": (
                f"Resize or pad the input to {expected} on axis {index}; for other sizes, export "
                f"again with that axis dynamic: torch.onnx.export(..., input_names=['{name}'], "
                f"dynamic_axes={{'{name}': {{{index}: 'dim{index}'}}}})."
            ),
        }
    got_rank, expected_rank = groups.get("got_rank", ""), groups.get("expected_rank", "")
    if got_rank.isdigit() and expected_rank.isdigit():
        missing = int(got_rank) < int(expected_rank)
        return {
            "onnx_note": f": {name} has {got_rank} dimensions, the model takes {expected_rank}",
            "onnx_advice": (
                "Add the batch axis (x[None] or np.expand_dims(x, 0))."
                if missing
                else "Remove the extra axis (np.squeeze), or export the model for this rank."
            ),
        }
    got_type, expected_type = groups.get("got_type", ""), groups.get("expected_type", "")
    if got_type and expected_type:
        numpy = expected_type.removeprefix("tensor(").removesuffix(")")
        return {
            "onnx_note": f": {name} is {got_type}, the model takes {expected_type}",
            "onnx_advice": f"Convert the input: x.astype(np.{numpy}) (NumPy makes float64 by default).",
        }
    return {}


def safetensors(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    tensor = groups.get("tensor")
    return {"tensor_note": f" ({tensor})"} if tensor else {}


def json_value(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    kind = groups.get("type", "")
    if kind in ("Tensor", "Parameter"):
        how = "tensor.item() for one value, tensor.tolist() for more (after .detach().cpu() is implied)"
    elif kind in ("EagerTensor", "ResourceVariable"):
        how = "x.numpy().tolist() (or float(x) for one value)"
    elif kind in ("ndarray", "ArrayImpl", "DeviceArray"):
        how = "array.tolist()"
    else:
        how = f"float(x) or int(x) (a NumPy {kind} scalar is not a Python number)"
    return {
        "json_advice": f"Convert the {kind} before json.dump/dumps: {how}; or pass "
        "default=lambda o: o.tolist() if hasattr(o, 'tolist') else str(o). The value is "
        "usually a metric or statistic a newer library returns as a tensor."
    }


def keras(groups: dict[str, str], facts: dict[str, str], machine: Machine | None) -> dict[str, str]:
    name, kind = groups.get("name", ""), groups.get("kind", "") or "class"
    if groups.get("file"):
        return {
            "keras_what": f"{groups['file']}: Keras 3 loads only .keras and H5 files",
            "keras_advice": (
                "The file is a TensorFlow SavedModel (Keras 2): load it with "
                "keras.layers.TFSMLayer(path, call_endpoint='serving_default') for inference, or "
                "install tf_keras and use tf_keras.models.load_model (TensorFlow 2.16 and later "
                "ship Keras 3)."
            ),
        }
    if not name:
        return {}
    what = f"the {kind} '{name}'"
    if name in _KERAS_BUILTINS:
        advice = (
            f"'{name}' is Keras's own, so the file was written by another Keras release than "
            "the one loading it: load it with that release (the training environment's "
            "keras/tensorflow versions; tf_keras for Keras 2 files under TensorFlow 2.16+), or "
            "rebuild the model in code and load only the weights (model.load_weights)."
        )
    elif name == "KerasLayer":
        advice = (
            "It is TensorFlow Hub's layer: load_model(path, custom_objects={'KerasLayer': "
            "hub.KerasLayer}) after import tensorflow_hub as hub."
        )
    else:
        advice = (
            f"Give the loader the class: load_model(path, custom_objects={{'{name}': {name}}}) "
            "with the code that defines it imported, or decorate the class with "
            "@keras.saving.register_keras_serializable(); a custom class also needs get_config."
        )
    return {"keras_what": what, "keras_advice": advice}


def loss_target(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """CrossEntropyLoss's rows against the targets' count, one-hot targets, or BCE's shapes."""
    rows, targets = groups.get("input_batch", ""), groups.get("target_batch", "")
    if rows.isdigit() and targets.isdigit():
        batch = math.gcd(int(rows), int(targets))
        lengths = sorted((int(rows) // batch, int(targets) // batch))
        # both a batch times a length, and the lengths close (19 against 20 tokens): a shift or a
        # cut, not a merged axis; far-apart ratios (144 against 64) say nothing of lengths
        if batch > 1 and lengths[0] >= 4 and lengths[1] - lengths[0] <= max(1, lengths[1] // 4):
            # both are a batch times a length: the per-sample lengths differ, not the batch
            per_output, per_target = int(rows) // batch, int(targets) // batch
            return {
                "loss_note": f": {rows} rows of output and {targets} targets (both multiples "
                f"of {batch}: {per_output} against {per_target})",
                "loss_advice": (
                    "The output and the labels are flattened from sequences (or maps) of "
                    "different lengths: labels not shifted or cut as the model's outputs are, "
                    "positions the model adds (image or prompt tokens) that the labels lack, "
                    "generated outputs compared with reference labels, or outputs and masks of "
                    "different sizes. Make both the same length before the loss."
                ),
            }
        return {
            "loss_note": f": {rows} rows of output, {targets} target{'' if targets == '1' else 's'}",
            "loss_advice": (
                "The output's first axis must be the batch. Either the forward merged the batch "
                "with another axis (a sequence's tokens: flatten the labels the same way, "
                "loss(logits.view(-1, V), labels.view(-1)); a view(-1, k) with the wrong k: use "
                "x.flatten(1)), or it hard-codes the batch size, which the last, smaller batch "
                "breaks (use x.size(0), or DataLoader(..., drop_last=True))."
            ),
        }
    target, output = _dims(groups.get("target_size", "")), _dims(groups.get("input_size", ""))
    if target and output:
        note = f": targets [{', '.join(map(str, target))}], output [{', '.join(map(str, output))}]"
        differ = [i for i, (t, o) in enumerate(zip(target, output, strict=False)) if t != o]
        if len(target) == len(output) and differ == [1] and len(target) > 2:
            advice = (
                f"The labels have {target[1]} channels and the output {output[1]}: the model's "
                "number of classes (num_classes, out_channels) is not the labels', or the masks "
                "are stored as RGB images (3 channels) where one is expected (load them with "
                ".convert('L'), or one class index per pixel with CrossEntropyLoss)."
            )
        else:
            advice = (
                "The BCE losses take targets of the output's exact shape: "
                "target.float().view_as(output) (or output.squeeze(-1) for one logit per sample)."
            )
        return {"loss_note": note, "loss_advice": advice}
    return {
        "loss_note": ": a class-index loss got targets with more than one value per sample",
        "loss_advice": (
            "CrossEntropyLoss and NLLLoss take one class index per sample, shape [N] (or [N, "
            "d1, ...] for dense outputs): from one-hot or [N, 1] labels pass target.argmax(1) "
            "or target.squeeze(1), as long integers. If samples really carry several labels "
            "(multi-label data), use a multi-label loss instead: BCEWithLogitsLoss on multi-hot "
            "targets (a multi-label head)."
        ),
    }


def dataset_empty(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    path = groups.get("path", "")
    return {"path_note": f" in {path}"} if path else {}


def device_assert(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    assertion = groups.get("assertion", "")
    if "n_classes" in assertion or "target" in assertion.lower():
        advice = (
            "A class label is < 0 or ≥ num_classes: check labels.min() and labels.max() against the "
            "model's number of outputs (1-based labels, a 'background' class, ignore_index=-1 instead "
            "of -100 are the usual culprits)."
        )
    elif "input_val" in assertion or "zero" in assertion:
        advice = "BCE inputs or targets are outside [0, 1]: apply sigmoid first, or use BCEWithLogitsLoss."
    elif bounds := re.search(
        r"index (-?\d+) is out of bounds for dimension (\d+) with size (\d+)", assertion
    ):
        index, axis, size = bounds.groups()
        advice = (
            f"Index {index} is past the end of a tensor's axis {axis} (size {size}): a class or "
            "token id used as an index beyond what it indexes (labels against num_classes, ids "
            "against the vocabulary), or an indexing bug at the failing line (a loop bound, a "
            "step past a schedule's length); the traceback's last frame shows which tensor."
        )
    elif "index" in assertion.lower() or "idx" in assertion or "range in self" in assertion:
        advice = (
            "An index into an embedding or index_select is too large: in a language model token "
            "ids ≥ the vocabulary size (call model.resize_token_embeddings(len(tokenizer)) after "
            "adding tokens) or positions ≥ max_position_embeddings (truncate inputs to the "
            "model's maximum length); in a detector or segmenter class ids ≥ the number of classes "
            "the config declares (nc, num_classes)."
        )
    else:
        advice = "Check that every label and index is in range for the layer that consumes it."
    return {"assert_advice": advice, "assertion": assertion or "index in range"}

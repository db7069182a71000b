"""The fixes of the causes in tensors (shapes, dtypes, half precision on the CPU) and in what
json, ONNX Runtime and Keras refuse, read from real threads' logs (tests/corpus/logs, sources in
SOURCES.md): each remedy follows from the sizes, dtypes and names the message gives."""

from __future__ import annotations

import pytest

from dlrig import diagnose
from tests.conftest import CORPUS, corpus_root

LOGS = CORPUS / "logs"


_root = corpus_root


def test_embedding_widths_of_two_models_name_a_component_of_another_model():
    """comfyanonymous/ComfyUI#7114: a 768-wide text encoder's output reached a layer built for
    T5-XXL's 4096 (the wrong umt5 file for Wan 2.1): not data to resize."""
    root = _root("layer_input_mismatch/ComfyUI-7114-wan-text-encoder-mismatch.log")
    assert root.cause == "layer_input_mismatch" and root.confidence >= 0.5
    assert "another model" in root.fixes[0] and "T5" in root.fixes[0]
    assert "resize" not in root.fixes[0]


def test_a_linear_layer_fed_other_features_gets_their_count():
    """ld-lsi#10: a 640x480 input where the model was built for another size."""
    root = _root("layer_input_mismatch/ld-lsi-10-input-640x480.log")
    assert "7680" in root.explanation and "10240" in root.explanation
    assert "in_features to 10240" in root.fixes[0]
    assert "flatten took the batch" not in root.fixes[0]  # 10240 is no multiple of 7680


@pytest.mark.parametrize(
    ("log", "said"),
    [
        # a conv's channels: an RGBA image where the layer takes RGB
        (
            "layer_input_mismatch/ComfyUI_SLK_joy_caption_two-13-rgba-4-channels.log",
            "convert('RGB')",
        ),
        # an elementwise op's sizes 4 and 3: the maintainer's "a 32-bit PNG"
        ("layer_input_mismatch/ShapeMatchingGAN-23-rgba-png-4-vs-3.log", "convert('RGB')"),
        # a sequence past BERT's 512 positions, by broadcast and by Tensor.expand
        ("layer_input_mismatch/sentence-transformers-929-sequence-past-512.log", "max_length=512"),
        ("layer_input_mismatch/spert-60-expanded-size-past-512.log", "max_length=512"),
        # a spatial size off by two in an encoder-decoder
        ("layer_input_mismatch/DMRA-5-size-150-vs-152.log", "multiple of 32"),
    ],
)
def test_shape_mismatches_say_what_the_sizes_point_to(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "layer_input_mismatch" and root.confidence >= 0.5
    assert said in root.fixes[0]


def test_sizes_that_point_nowhere_are_a_possible_cause():
    """MultiPropReg#3: 40 against 56 on a volume's axis (the maintainer: the data's size and the
    Spatial Transformer's configured size differ): nothing in the numbers says which."""
    root = _root("layer_input_mismatch/MultiPropReg-3-volume-size-40-vs-56.log")
    assert root.cause == "layer_input_mismatch" and root.confidence < 0.5
    assert root.explanation.startswith("Possibly:")
    doubt = diagnose.diagnose_paths(
        [LOGS / "layer_input_mismatch/MultiPropReg-3-volume-size-40-vs-56.log"]
    ).to_dict()["causes"][0]["doubt"]
    assert doubt == "the sizes alone do not say which of the two tensors is not as expected"
    assert _root("layer_input_mismatch/DMRA-5-size-150-vs-152.log").to_dict()["doubt"] is None


@pytest.mark.parametrize(
    ("log", "said"),
    [
        ("dtype_mismatch/sentence-transformers-770-float64-labels.log", ".float()"),
        ("dtype_mismatch/ElegantRL-9-double-q-target.log", "float64"),
        ("dtype_mismatch/pytorch-yolo-v3-7-half-model-float-input.log", "torch.autocast"),
        ("dtype_mismatch/StableCascade-93-autocast-bf16-fp32-model.log", "torch.autocast"),
    ],
)
def test_dtype_fixes_follow_the_dtypes(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "dtype_mismatch"
    assert said in root.fixes[0]


@pytest.mark.parametrize(
    ("log", "said"),
    [
        ("onnx_input_mismatch/WALDO-9-image-not-resized-to-model.log", "'images': {2: 'dim2'}"),
        ("onnx_input_mismatch/essentia-1507-maest-fixed-batch-1.log", "{0: 'dim0'}"),
        ("onnx_input_mismatch/samexporter-8-hwc-vs-nchw-rank.log", "batch axis"),
    ],
)
def test_onnx_inputs_get_the_axis_or_the_rank(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "onnx_input_mismatch"
    assert said in root.fixes[0]


@pytest.mark.parametrize(
    ("log", "said"),
    [
        # Keras's own class names: the file and the loader are different releases
        (
            "keras_unknown_object/keras-retinanet-1480-functional-tf23-vs-tf22.log",
            "another Keras release",
        ),
        (
            "keras_unknown_object/Weapon-Detection-And-Classification-4-keras-version.log",
            "another Keras release",
        ),
        # a custom layer: custom_objects with its name
        (
            "keras_unknown_object/keras-pos-embd-1-custom-objects.log",
            "{'TrigPosEmbedding': TrigPosEmbedding}",
        ),
    ],
)
def test_keras_tells_its_own_classes_from_custom_ones(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "keras_unknown_object"
    assert said in root.fixes[0]


@pytest.mark.parametrize(
    ("log", "said"),
    [
        ("tensor_not_json_serializable/monk_v1-59-int64-class-labels.log", "int(x)"),
        ("tensor_not_json_serializable/mlpp-lib-8-eagertensor-threshold.log", "x.numpy().tolist()"),
    ],
)
def test_json_fixes_convert_the_type_named(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "tensor_not_json_serializable"
    assert said in root.fixes[0]


def test_half_precision_on_the_cpu_names_the_kernel():
    root = _root("half_precision_on_cpu/momask-codes-45-clip-fp16-cpu-only.log")
    assert root.cause == "half_precision_on_cpu" and "baddbmm__mkl" in root.explanation


@pytest.mark.parametrize(
    "log",
    [
        "outside/other-KERPLE-5-max-all-cuda-old-torch.log",
        "outside/other-pytorch-116763-gru-cell-cuda-bf16.log",
    ],
)
def test_a_cuda_kernel_without_a_dtype_is_not_the_cpu(log: str) -> None:
    """The same AT_DISPATCH message from a CUDA kernel (a torch release without its BFloat16
    case): not a model left on the CPU."""
    root = diagnose.diagnose_paths([LOGS / log]).root
    assert root is None or root.cause != "half_precision_on_cpu"


def test_batchnorm_names_the_single_sample_input():
    root = _root("batchnorm_single_sample/scvi-tools-2314-last-batch-one-cell.log")
    assert root.cause == "batchnorm_single_sample" and "[1, 128]" in root.explanation
    assert "drop_last=True" in root.fixes[0]


def test_safetensors_names_the_non_contiguous_tensor():
    root = _root("safetensors_noncontiguous/ComfyUI-3923-force-channels-last.log")
    assert "input_blocks.0.0.weight" in root.explanation


@pytest.mark.parametrize(
    ("log", "said"),
    [
        # BCE: a trailing axis of 1 on one side
        ("loss_target_mismatch/PyTorch-Book-3-target-n-vs-n1.log", "view_as(output)"),
        # the class axis differs: masks stored as RGB images against a one-class output
        (
            "loss_target_mismatch/Pytorch-UNet-244-rgb-mask-target.log",
            "3 channels and the output 1",
        ),
        # CrossEntropyLoss given [N, 1] targets (THCUNN's "multi-target not supported")
        ("loss_target_mismatch/cutorch-227-target-2d-n1.log", "target.squeeze(1)"),
        # rows against targets: a fixed batch size that the last, smaller batch breaks
        ("loss_target_mismatch/Cylinder3D-58-fixed-batch-size-reshape.log", "x.size(0)"),
    ],
)
def test_loss_target_fixes_follow_the_shapes(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "loss_target_mismatch"
    assert said in root.fixes[0]


def test_an_empty_dataset_names_the_path_it_looked_in():
    root = _root(
        "dataset_empty/yolov3-channel-and-layer-pruning-13-image-label-path-substitution.log"
    )
    assert root.cause == "dataset_empty"
    root = _root("dataset_empty/yolov5-256-images-twice-in-path.log")
    # "No labels found in /home/yuhongyi/brainwash/labels/val/.": the stop ends the sentence, not the path
    assert (
        root.explanation
        == "The data loader found no samples in /home/yuhongyi/brainwash/labels/val/."
    )
    assert "ls /home/yuhongyi/brainwash" in root.fixes[0]

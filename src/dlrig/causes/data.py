"""Causes in what a run reads and writes: the samples of a batch, dataset files, evaluation
sets, checkpoints' files and models exported for serving."""

from __future__ import annotations

from dlrig.causes.model import Cause

CAUSES: tuple[Cause, ...] = (
    Cause(
        "collate_unequal_sizes",
        "The samples of a batch have different shapes",
        "The DataLoader's default collate stacks the batch's samples into one tensor, so every "
        "sample must have the same shape; images of different sizes (a Resize given one int keeps "
        "the aspect ratio), sequences of different lengths or a varying number of boxes cannot "
        "be stacked. A batch of one works, which is why it fails only from batch size 2.",
        "Give every sample one shape: Resize((H, W)) or a crop in the transform, padding in a "
        "collate_fn (pad_sequence, a tokenizer with padding=True, DataCollatorWithPadding), or a "
        "collate_fn that returns a list for targets of varying size (detection boxes).",
    ),
    Cause(
        "dataset_file_unreadable",
        "A dataset file cannot be read as an image",
        "The loader opened a file that is not a readable image: a corrupt or truncated download, "
        "a non-image file in the image folder (a .txt, .npy or .DS_Store, a Git LFS pointer), or "
        "a path that does not exist (cv2.imread returns None without an error, and the next "
        "OpenCV call fails on the empty image).",
        "Find the files: open each with PIL (Image.open(p).verify()) and list the failures, then "
        "remove or replace them and keep only images in the image folders; for cv2, check the "
        "path exists before imread.",
    ),
    Cause(
        "coco_results_mismatch",
        "The predictions name images the COCO annotation file does not have",
        "pycocotools' loadRes checks that every image id in the predictions is in the "
        "ground-truth annotation file: the evaluation used another split's annotation file, or "
        "the predictions carry other ids (indices, file names, strings instead of the dataset's "
        "integer ids).",
        "Evaluate with the annotation file of the images you predicted on, and write each "
        "prediction's image_id as the dataset gave it (coco.getImgIds()).",
    ),
    Cause(
        "lightning_hparams_not_saved",
        "The checkpoint lacks the arguments the LightningModule needs",
        "LightningModule.load_from_checkpoint rebuilds the module from the hyperparameters saved "
        "in the checkpoint; without self.save_hyperparameters() in __init__ (or with the argument "
        "in its ignore list) the checkpoint has none, and __init__ misses required arguments.",
        "Call self.save_hyperparameters() in __init__; for a checkpoint already written, pass "
        "the missing arguments: Model.load_from_checkpoint(path, arg=value).",
    ),
    Cause(
        "torchscript_unsupported",
        "torch.jit.script cannot compile this Python",
        "torch.jit.script compiles the model's source and supports a subset of Python: the code "
        "uses a builtin, a dynamic attribute, an untyped default or a library call outside it.",
        "Trace instead (torch.jit.trace) where control flow does not depend on the data, or "
        "export with torch.export / torch.onnx.export(dynamo=True); for script, annotate types "
        "and mark Python-only methods @torch.jit.ignore or @torch.jit.unused.",
    ),
    Cause(
        "tensorrt_op_unsupported",
        "TensorRT's ONNX parser has no implementation of an operator",
        "The ONNX model uses an operator this TensorRT release does not import, or a custom "
        "operator whose plugin library is not built or not loaded before parsing.",
        "Use a TensorRT release that supports the operator (onnx-tensorrt's operator matrix), "
        "export with another opset or simplify the graph (onnxsim, onnx-graphsurgeon), or build "
        "and load the plugin (trtexec --plugins=lib.so; initLibNvInferPlugins).",
    ),
    Cause(
        "safetensors_shared_tensors",
        "safetensors refused to save tensors that share memory",
        "safetensors stores each tensor once and will not save two names for one storage (tied "
        "input and output embeddings, a module registered twice, a view of another weight) "
        "through save_file.",
        "Save with safetensors.torch.save_model(model, path) (load with load_model), or let "
        "transformers save it (save_pretrained handles the weights it knows are tied; otherwise "
        "safe_serialization=False, or Trainer's save_safetensors=False).",
    ),
    Cause(
        "onnxruntime_op_unsupported",
        "ONNX Runtime has no kernel for an operator of the model",
        "The exported graph has an operator, opset or input type for which this ONNX Runtime "
        "build (or its execution provider) has no implementation: a newer opset than the runtime "
        "knows, a float16 or int type the kernel lacks, a custom or contrib op.",
        "Export with an opset and types the runtime supports (torch.onnx.export(..., "
        "opset_version=17), float32 inputs), upgrade onnxruntime, or run the node on another "
        "execution provider.",
    ),
)

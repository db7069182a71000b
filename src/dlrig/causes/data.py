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
    Cause(
        "onnx_input_mismatch",
        "The input does not match the ONNX model's declared input",
        "ONNX Runtime checks every input against the model's declared input: the model was "
        "exported with fixed dimensions (the example input's height, width or batch size) and "
        "the input has others, the input lacks the batch dimension, or its type differs "
        "(float64 from NumPy where the model takes float32).",
        "Feed the declared shape and type (resize or pad to it, add the batch axis with "
        "x[None], .astype(np.float32)); for other sizes, export again with dynamic axes "
        "(torch.onnx.export(..., dynamic_axes={'input': {0: 'batch', 2: 'height', 3: "
        "'width'}})).",
    ),
    Cause(
        "safetensors_noncontiguous",
        "safetensors refused to save a non-contiguous tensor",
        "safetensors writes each tensor's memory as it lies and refuses a tensor that is a "
        "non-contiguous view (a transpose, a slice or a permute of another tensor, a weight "
        "made from a transposed NumPy array).",
        "Make the named tensor contiguous before saving (for p in model.parameters(): p.data = "
        "p.data.contiguous()), or save without safetensors (save_pretrained(..., "
        "safe_serialization=False), Trainer's save_safetensors=False).",
    ),
    Cause(
        "tensor_not_json_serializable",
        "A tensor or NumPy value was passed to json",
        "json writes Python numbers, strings, lists and dicts only; a metric, a config value or "
        "a logged statistic was a torch tensor, a NumPy array or a NumPy scalar (float32, int64) "
        "(often after a library began returning tensors where it returned numbers).",
        "Convert before writing: tensor.item() for one value, tensor.tolist() or "
        "array.tolist() for many, float()/int() for NumPy scalars; or json.dump(..., "
        "default=lambda o: o.tolist() if hasattr(o, 'tolist') else str(o)).",
    ),
    Cause(
        "keras_unknown_object",
        "The saved Keras model names a class this Keras does not know",
        "Loading a Keras model rebuilds each layer, activation and loss from the class name "
        "stored in the file; a custom class was not given to the loader (custom_objects, "
        "register_keras_serializable), or the file was written by another Keras release whose "
        "configuration this one reads differently (Keras 3 and Keras 2, tf.keras and keras).",
        "Pass the custom classes when loading: load_model(path, custom_objects={'Name': Name}) "
        "(TF Hub layers: {'KerasLayer': hub.KerasLayer}); for a file from another Keras "
        "release, load it with that release (tf_keras for Keras 2 files under TensorFlow 2.16 "
        "or later) or rebuild the model in code and load only the weights.",
    ),
    Cause(
        "dataset_empty",
        "The dataset has no samples: its path or pattern finds no files",
        "The training data loader was built on an empty dataset: the path in the config or "
        "the command does not point at the data (a relative path from another working "
        "directory, a dataset YAML whose path and train/val keys do not join to the images), "
        "the file pattern or extension matches nothing (.JPG against .jpg), or a filter dropped "
        "every sample.",
        "Check what the dataset sees before training: print(len(dataset)) and the resolved "
        "path (os.path.abspath); list the folder (ls path | head) and fix the path, the "
        "extension or the YAML's path/train/val entries; use absolute paths when the working "
        "directory changes.",
    ),
    Cause(
        "text_encoding_mismatch",
        "A file was read or written as text in another encoding",
        "Python opened a file as text with an encoding it is not in: open() without encoding= "
        "uses the locale's (GBK on Chinese Windows, cp1252 elsewhere on Windows), which fails on "
        "UTF-8 files; or a binary file (an image, a pickle, a checkpoint) was opened as text.",
        "Give the encoding: open(path, encoding='utf-8') (pandas: read_csv(..., "
        "encoding='utf-8')), or run Python in UTF-8 mode (set PYTHONUTF8=1); open binary files "
        "with 'rb'.",
    ),
    Cause(
        "nan_in_input_data",
        "The data given to an estimator or metric contains NaN or infinity",
        "scikit-learn checks its inputs and refuses NaN and infinite values: missing values in "
        "the data (empty cells of a CSV), a feature computed with a division by zero or a log of "
        "zero, or a model's predictions that became NaN passed to a metric.",
        "Find them: np.isnan(X).sum() / np.isinf(X).sum(), df.isna().sum() per column; fill or "
        "drop them (SimpleImputer, df.dropna()); for predictions, the model diverged: look at "
        "the training loss.",
    ),
    Cause(
        "onnx_export_unsupported",
        "The ONNX exporter cannot export an operator of the model",
        "torch.onnx.export translates each operator of the traced model into ONNX operators of "
        "the chosen opset; an operator with no translation (or none in that opset) stops the "
        "export. Newer opsets and torch releases cover more operators.",
        "Export with the opset the message names (opset_version=N) or a newer one, try the "
        "dynamo-based exporter (torch.onnx.export(..., dynamo=True)), or replace the operator in "
        "the model (or register a custom symbolic for it).",
    ),
    Cause(
        "object_not_picklable",
        "An object could not be pickled to another process or a file",
        "Python sends objects to other processes (DataLoader workers and multiprocessing under "
        "the spawn start method: Windows, macOS) and saves them (torch.save of a whole model) by "
        "pickling them; lambdas, functions and classes defined inside a function, and open "
        "handles (locks, files, LMDB environments, database connections, generators) cannot be "
        "pickled.",
        "Define the dataset, collate_fn and worker functions at a module's top level (no lambdas "
        "or nested functions), open file handles and environments lazily in each worker (in "
        "__getitem__ or worker_init_fn), and save a model's state_dict rather than the module; "
        "num_workers=0 confirms it is the workers.",
    ),
    Cause(
        "pickled_class_missing",
        "Unpickling needs a class this program cannot find",
        "A pickle stores a class by its module and name and imports it when loading: a "
        "checkpoint saved as a whole model (torch.save(model)) needs the model's class under the "
        "same module path (a class defined in the saving script's __main__ is looked up in the "
        "loading script's __main__); a worker started by spawn re-imports the main module, and "
        "a class defined in a notebook or an interactive session is not there.",
        "Import or define the class under the module name the message gives before loading, and "
        "save state_dicts rather than whole models; for spawned workers, move the Dataset (and "
        "collate_fn) from the notebook into a .py module and import it.",
    ),
)

"""Causes in the tensors a program hands its layers: their shapes, their dtypes, a batch too
small for a layer's statistics, and weights that were never given data."""

from __future__ import annotations

from dlrig.causes.model import Cause

CAUSES: tuple[Cause, ...] = (
    Cause(
        "layer_input_mismatch",
        "The input's shape is not the one a layer was built for",
        "A layer got data of another size than it was built for: a Linear layer's in_features "
        "differ from the flattened features that reach it (images of another size than the "
        "model was designed for, another backbone), or a convolution's input channels differ "
        "from its weight's (an RGBA or grayscale image, channels-last data where channels-first "
        "is expected).",
        "Make the data match the model: resize images to the size the model was designed and "
        "trained for, convert them to the channels it takes (PIL's .convert('RGB')), permute "
        "channels-last arrays (x.permute(0, 3, 1, 2)); or change the layer to the data "
        "(in_features of the first Linear after the flatten, nn.LazyLinear) and train it again.",
    ),
    Cause(
        "dtype_mismatch",
        "Tensors of different floating-point types meet in one operation",
        "An operation got tensors of two dtypes: a model in float16 or bfloat16 fed float32 "
        "inputs (or the other way round), float64 data from NumPy meeting float32 weights, or "
        "half-precision code run without autocast.",
        "Give the inputs the model's dtype (x.to(next(model.parameters()).dtype)), convert NumPy "
        "data with .float() (torch.from_numpy(a).float()), or run the forward under "
        "torch.autocast so mixed precision casts for you.",
    ),
    Cause(
        "batchnorm_single_sample",
        "A batch of one sample reached BatchNorm in training mode",
        "BatchNorm in training mode normalises with the batch's own statistics and cannot with "
        "one value per channel: the last batch of an epoch held a single sample (the dataset's "
        "size modulo the batch size is 1), each GPU got one sample, or inference ran with the "
        "model still in training mode.",
        "Drop the incomplete last batch (DataLoader(..., drop_last=True)), use at least two "
        "samples per GPU, and call model.eval() before inference.",
    ),
    Cause(
        "meta_tensor_copy",
        "Weights that were never loaded are being moved",
        "Some parameters are still on the 'meta' device, which holds shapes and no data: the "
        "model was created empty (init_empty_weights, device='meta') or loaded with device_map "
        "or low_cpu_mem_usage and those weights were offloaded or missing from the checkpoint, "
        "and then .to() or .cuda() tried to copy them.",
        "Do not move a model that was loaded with device_map (it is already placed); load it "
        "fully where it should run (from_pretrained(..., device_map=None) then .to(device), or "
        "device_map={'': 0}); read the loading warnings for weights 'newly initialized' or "
        "missing from the checkpoint; for a module built on meta, use to_empty() and load the "
        "weights.",
    ),
    Cause(
        "half_precision_on_cpu",
        "A half-precision model is running on the CPU",
        "Many of torch's CPU kernels have no float16 (in older releases no bfloat16) case: a "
        "model loaded in half precision (torch_dtype=torch.float16, .half()) ran on the CPU, "
        "most often because it never reached the GPU (CUDA not available, a CPU-only torch, no "
        "device or device_map given).",
        "Run it on the GPU (check torch.cuda.is_available(), then model.to('cuda') or "
        "device_map='auto'), or load it in float32 for the CPU (torch_dtype=torch.float32, "
        "model.float()).",
    ),
    Cause(
        "loss_target_mismatch",
        "The loss got targets of another shape than the model's output",
        "A loss function checks its targets against the model's output: CrossEntropyLoss and "
        "NLLLoss take one class index per sample (not one-hot rows), with as many samples as "
        "the output has rows; the BCE losses take targets of exactly the output's shape. A "
        "reshape in forward that merged the batch with another axis, labels still one-hot, or a "
        "trailing axis of 1 on one side breaks that.",
        "Make the target the shape the loss takes: class indices of shape [N] for "
        "CrossEntropyLoss (target.argmax(1) from one-hot rows; for sequences logits.view(-1, "
        "V) with labels.view(-1)), and target.float().view_as(output) for BCEWithLogitsLoss; "
        "check the model's forward keeps the batch axis (x.flatten(1), not x.view(-1, k)).",
    ),
    Cause(
        "mps_op_unsupported",
        "An operator or dtype is not supported on Apple's MPS backend",
        "PyTorch's MPS backend (the GPU of Apple-silicon Macs) implements a subset of torch's "
        "operators and no float64: an operator without an MPS kernel raises NotImplementedError, "
        "and a float64 (or, on older macOS, bfloat16 or complex; float8 anywhere) tensor cannot "
        "be moved to the device.",
        "For a missing operator set PYTORCH_ENABLE_MPS_FALLBACK=1 before Python starts (that "
        "operator runs on the CPU), or upgrade torch; for float64, cast to float32 before "
        ".to('mps') (numpy arrays are float64 by default).",
    ),
)

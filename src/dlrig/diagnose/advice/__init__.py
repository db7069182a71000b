"""Fix details computed from the log's own numbers and, when given, the machine's facts.

Signatures' fix templates name variables ({oom_batch_advice}, {driver_advice}, ...); this module
computes them (by kind: `memory`, `install`, `packages`, `run`, `tensors`, `gpu`, `data`). A variable it cannot compute is left out, and the template line with it is
dropped rather than printed half-filled. Install commands (a torch wheel, an index, a driver)
come from `dlrig.diagnose.install`, which asks the resolver.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from dlrig.diagnose.advice import data, gpu, memory, packages, run, tensors
from dlrig.diagnose.advice.figures import FIGURE
from dlrig.machine.model import Machine

# cause -> (module, function); the install advisors load the resolver and the hardware tables
# (0.13 s of every `dlrig diagnose` start-up), so their module is imported for them only.
ADVISORS: dict[str, tuple[str, str]] = {
    "cuda_oom": ("memory", "cuda_oom"),
    "driver_too_old": ("install", "driver_too_old"),
    "no_nvidia_driver": ("install", "no_driver"),
    "no_kernel_image": ("install", "no_kernel_image"),
    "version_mismatch_torch_torchvision": ("install", "companions"),
    "cpu_only_torch": ("install", "cpu_only"),
    "missing_cuda_lib": ("packages", "missing_cuda_lib"),
    "device_side_assert_label_range": ("tensors", "device_assert"),
    "nccl_timeout": ("run", "nccl_timeout"),
    "port_in_use": ("run", "port_in_use"),
    "extension_abi_mismatch": ("install", "extension_abi"),
    "extension_not_built": ("packages", "extension"),
    "glibcxx_missing": ("install", "glibcxx"),
    "ld_library_path_shadowing": ("install", "shadowing"),
    "ddp_unused_parameters": ("run", "ddp_unused"),
    "ddp_reentrant_checkpointing": ("run", "ddp_twice"),
    "inplace_modified_for_grad": ("run", "inplace"),
    "safetensors_shared_tensors": ("run", "shared_tensors"),
    "lightning_hparams_not_saved": ("run", "lightning_hparams"),
    "tensorrt_op_unsupported": ("run", "tensorrt_op"),
    "shm_too_small": ("run", "shm"),
    "torch_wheel_unavailable": ("install", "torch_wheel"),
    "host_alloc_refused": ("memory", "host_alloc"),
    "dataloader_worker_killed": ("data", "worker_signal"),
    "nccl_system_error": ("run", "nccl_system"),
    "tf_gpu_libraries_missing": ("install", "tf_libraries"),
    "jax_cuda_backend_failed": ("install", "jax_component"),
    "python_package_missing": ("packages", "module_missing"),
    "os_library_missing": ("packages", "os_library"),
    "package_api_mismatch": ("packages", "api_mismatch"),
    "local_file_shadows_package": ("packages", "shadow_file"),
    "checkpoint_corrupt": ("run", "checkpoint"),
    "state_dict_mismatch": ("run", "state_dict"),
    "gpu_too_old_for_feature": ("run", "gpu_too_old"),
    "serving_config_invalid": ("run", "serving_config"),
    "layer_input_mismatch": ("tensors", "layer_input"),
    "dtype_mismatch": ("tensors", "dtype"),
    "onnx_input_mismatch": ("tensors", "onnx"),
    "safetensors_noncontiguous": ("tensors", "safetensors"),
    "tensor_not_json_serializable": ("tensors", "json_value"),
    "keras_unknown_object": ("tensors", "keras"),
    "loss_target_mismatch": ("tensors", "loss_target"),
    "dataset_empty": ("tensors", "dataset_empty"),
    "cudnn_status_error": ("gpu", "cudnn"),
    "text_encoding_mismatch": ("data", "codec"),
    "nan_in_input_data": ("data", "nan_input"),
    "torch_compile_failed": ("gpu", "compile_failure"),
    "mps_op_unsupported": ("gpu", "mps"),
    "cudnn_version_mismatch": ("gpu", "cudnn_versions"),
    "fp16_overflow_nan": ("data", "nan_loss"),
    "onnx_export_unsupported": ("data", "onnx_export"),
    "object_not_picklable": ("data", "pickling"),
    "pickled_class_missing": ("data", "pickled_class"),
}


def variables(
    cause: str, groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> tuple[dict[str, str], dict[str, float]]:
    """(the fix templates' values, the figures the fixes were computed from); an advisor's doubt
    travels in the values under `DOUBT`."""
    merged = {k: v for k, v in groups.items() if not k.startswith("_")}
    figures: dict[str, float] = {}
    advisor = _advisor(cause)
    if advisor is not None:
        for key, value in advisor(groups, facts, machine).items():
            if key.startswith(FIGURE):
                figures[key[len(FIGURE) :]] = float(value)
            else:
                merged[key] = value
    return merged, figures


def _module(kind: str) -> ModuleType:
    if kind == "install":
        from dlrig.diagnose.advice import install  # lazy: the resolver, only for install fixes

        return install
    return {
        "memory": memory,
        "packages": packages,
        "tensors": tensors,
        "gpu": gpu,
        "data": data,
    }.get(kind, run)


def _advisor(cause: str) -> Callable[..., dict[str, Any]] | None:
    found = ADVISORS.get(cause)
    if found is None:
        return None
    kind, name = found
    advisor: Callable[..., dict[str, Any]] = getattr(_module(kind), name)
    return advisor

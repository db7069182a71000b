"""Documentation stays true: README quick start, causes, and every check explained."""

from __future__ import annotations

import re

from dlrig import causes, doctor
from tests.conftest import ROOT


def test_readme_quick_start_has_exactly_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("##", 1)[0]
    block = re.search(r"```\n(.*?)```", quick, re.S).group(1)
    assert block.split("\n")[:-1] == ["make run", "make test"]


def test_doctor_page_check_count_is_current():
    page = (ROOT / "docs" / "commands" / "doctor.md").read_text()
    assert f"It runs {len(doctor.all_checks())} checks" in page


def test_ci_runs_make_test():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_cause_vocabulary_is_complete():
    expected = {
        "cuda_oom",
        "cpu_oom_killed",
        "driver_too_old",
        "no_nvidia_driver",
        "driver_library_mismatch",
        "cpu_only_torch",
        "duplicate_torch_installs",
        "missing_cuda_lib",
        "no_kernel_image",
        "version_mismatch_torch_torchvision",
        "container_toolkit_missing",
        "shm_too_small",
        "dataloader_worker_killed",
        "device_side_assert_label_range",
        "illegal_memory_access",
        "cudnn_status_error",
        "fp16_overflow_nan",
        "gpu_ecc_error",
        "xid_error",
        "gpu_fell_off_bus",
        "nccl_timeout",
        "nccl_wrong_socket_interface",
        "collective_timeout_uneven_data",
        "port_in_use",
        "disk_full",
        "too_many_open_files",
        # issue 23: the causes crash threads sampled by symptom showed were missing
        "extension_abi_mismatch",
        "glibcxx_missing",
        "ld_library_path_shadowing",
        "ddp_unused_parameters",
        "tensors_on_mixed_devices",
        "shm_permission_denied",
        "nccl_system_error",
        "host_alloc_refused",
        "jax_cuda_backend_failed",
        "tf_gpu_libraries_missing",
        "torchvision_not_imported",
        "job_time_limit",
        "python_package_missing",
        "package_api_mismatch",
        "local_file_shadows_package",
        "cudnn_version_mismatch",
        "checkpoint_corrupt",
        "state_dict_mismatch",
        "process_group_not_initialized",
        "gpu_index_out_of_range",
        "input_pipeline_bound",
        "gpu_throttling",
        "pcie_link_degraded",
        "launch_bound",
        "communication_exposed",
        "fp32_matmuls",
        "optimizer_unfused",
        "no_amdgpu_driver",
        "gpu_device_permission",
        "jax_jaxlib_mismatch",
        "gpu_too_old_for_feature",
        "fabric_manager_not_running",
        "weights_only_load_refused",
        # 2026-12-07: the causes the sixteen blind sets found outside the vocabulary most often
        "fp16_trainable_weights",
        "ddp_reentrant_checkpointing",
        "serving_config_invalid",
        "hub_access_denied",
        "model_architecture_unknown",
        "cpu_instruction_unsupported",
        "nccl_network_error",
        # 2026-12-07: a symptom sample's most frequent crash outside the vocabulary
        "cuda_forked_after_init",
        "os_library_missing",
        # 2026-12-07: a fifth symptom sample's most frequent crash outside the vocabulary
        "tensorrt_engine_mismatch",
        "nan_in_backward",
        "gpu_busy_or_unavailable",
        "kernel_launch_timeout",
        "gpu_p2p_unsupported",
        "distributed_backend_unavailable",
        "loss_without_grad",
        "lora_targets_not_found",
        # 2026-12-07: the eighth symptom sample's most frequent crashes outside the vocabulary
        "collate_unequal_sizes",
        "backward_graph_freed",
        "inplace_modified_for_grad",
        "kernel_resources_exceeded",
        "quantized_model_moved",
        "safetensors_shared_tensors",
        "dataset_file_unreadable",
        "coco_results_mismatch",
        "lightning_hparams_not_saved",
        "torchscript_unsupported",
        "tensorrt_op_unsupported",
        "extension_not_built",
        # 2026-12-07: the ninth symptom sample's most frequent crashes outside the vocabulary
        "view_noncontiguous",
        "index_dtype_invalid",
        "inference_tensor_in_autograd",
        "torch_wheel_unavailable",
        "onnxruntime_op_unsupported",
        # from the outside clusters of symptom samples 6-9 (manifest-v.csv, manifest-w.csv)
        "layer_input_mismatch",
        "dtype_mismatch",
        "half_precision_on_cpu",
        "batchnorm_single_sample",
        "meta_tensor_copy",
        "onnx_input_mismatch",
        "safetensors_noncontiguous",
        "tensor_not_json_serializable",
        "keras_unknown_object",
        "loss_target_mismatch",
        "dataset_empty",
        "text_encoding_mismatch",
        "nan_in_input_data",
        "torch_compile_failed",
        # from the tenth sample's outside threads (manifest-z.csv)
        "mps_op_unsupported",
        "onnx_export_unsupported",
        "spawn_main_unguarded",
        "object_not_picklable",
        "pickled_class_missing",
    }
    assert set(causes.CAUSES) == expected
    for cause in causes.CAUSES.values():
        assert cause.title and len(cause.explanation) > 80 and cause.default_fix


def test_importing_dlrig_does_not_import_torch():
    import subprocess
    import sys

    code = "import dlrig, dlrig.doctor, dlrig.machine.probe, sys; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"

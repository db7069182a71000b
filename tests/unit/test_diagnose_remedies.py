"""Remedies chosen by what the log shows besides the error (cuDNN's status, the platform, the GPU
it names, the package release a name belongs to): the tenth symptom sample's threads, whose
readers found the first answer doubtful, wrong or missing, and the confirmed threads of the causes
added from its outside clusters (tests/corpus/logs, SOURCES.md, manifest-y.csv, manifest-z.csv)."""

from __future__ import annotations

import pytest

from dlrig import diagnose
from tests.conftest import CORPUS, corpus_root

LOGS = CORPUS / "logs"


_root = corpus_root


def test_cudnn_bad_param_looks_at_the_input_not_memory():
    """keras-team/keras#4110: CUDNN_STATUS_BAD_PARAM from an empty second batch ("User error.
    Variable assignment issue"): a smaller batch is not the first thing to try."""
    root = _root("cudnn_status_error/keras-4110-s10.log")
    assert root.cause == "cudnn_status_error"
    assert "empty batch" in root.fixes[0] and "smaller batch" not in root.fixes[0]
    assert "out-of-memory" not in root.explanation


def test_a_rocm_build_on_an_nvidia_gpu_is_the_wrong_build():
    """easydiffusion#1477: hipErrorNoBinaryForGpu beside "GPU: Nvidia GeForce RTX 3050": no gfx
    target to add, the CUDA build to install."""
    root = _root("no_kernel_image/easydiffusion-1477-s10.log")
    assert "ROCm (AMD) build" in root.fixes[0] and "HSA_OVERRIDE" not in " ".join(root.fixes)


def test_a_triton_kernel_without_code_for_the_gpu_is_triton_s():
    root = _root("no_kernel_image/pytorch-162259-s10.log")
    assert "Triton" in root.fixes[0] and "architecture list" not in root.fixes[0]


def test_no_cuda_on_a_mac_changes_the_code_not_the_wheel():
    root = _root("cpu_only_torch/stable-diffusion-webui-3694-s10.log")
    assert root.cause == "cpu_only_torch" and "'mps'" in root.fixes[0]
    assert "nvidia-smi" not in root.fixes[0]


@pytest.mark.parametrize(
    ("log", "said", "fix"),
    [
        # torch.no_grad arrived in 0.4.0: the torch is older than the code
        (
            "package_api_mismatch/AlphaPose-297-s10.log",
            "torch.no_grad exists from torch 0.4.0",
            "'torch>=0.4.0'",
        ),
        # torch._six went in 2.0.0: the code is older than the torch
        (
            "package_api_mismatch/NAS-FCOS-13-s10.log",
            "torch._six was removed in torch 2.0.0",
            "'torch<2.0.0'",
        ),
        # setuptools 59.6 stopped importing distutils.version, which torch 1.10's tensorboard used
        # (pytorch/pytorch#69894)
        (
            "package_api_mismatch/pytorch-69894-distutils-version-setuptools-59-6.log",
            "no longer imported implicitly from setuptools 59.6.0",
            "'setuptools<59.6.0'",
        ),
    ],
)
def test_a_name_a_release_changed_is_that_release(log: str, said: str, fix: str) -> None:
    root = _root(log)
    assert root.cause == "package_api_mismatch" and root.confidence >= 0.5
    assert said in root.explanation and fix in root.fixes[0]


def test_an_unknown_missing_name_stays_a_lead():
    """The table's names only: a missing attribute it does not list is not claimed."""
    result = diagnose.diagnose_text("AttributeError: module 'torch' has no attribute 'lib'\n")
    assert result.root is None or result.root.confidence < 0.5


@pytest.mark.parametrize(
    ("log", "cause", "said"),
    [
        ("checkpoint_corrupt/earth2studio-217-s10.log", "checkpoint_corrupt", "head -c 200"),
        (
            "state_dict_mismatch/pytorch-video-recognition-10-s10.log",
            "state_dict_mismatch",
            "model.load_state_dict(ckpt)",
        ),
        ("gpu_too_old_for_feature/kernl-133-s10.log", "gpu_too_old_for_feature", "8.0"),
        ("missing_cuda_lib/horovod-3924-s10.log", "missing_cuda_lib", "libnccl-dev"),
        ("python_package_missing/openseg.pytorch-32-s10.log", "python_package_missing", "PATH"),
        # torch.library (1.12) and its later functions, from api_changes.csv
        ("package_api_mismatch/SINet-47-s10.log", "package_api_mismatch", "torch>=1.12.0"),
        # older torch printed no space after the colon
        ("cuda_oom/CR-GAN-8-s7.log", "cuda_oom", "batch"),
        ("cudnn_status_error/DBPN-Pytorch-65-s7.log", "cudnn_status_error", "cuDNN"),
        ("model_architecture_unknown/ollama-4572-s7.log", "model_architecture_unknown", "qwen2"),
        # torch 1.x's words for a device mismatch of an output tensor ('out')
        ("tensors_on_mixed_devices/ray-30063-s7.log", "tensors_on_mixed_devices", ""),
    ],
)
def test_messages_the_tenth_sample_s_readers_found_in_the_vocabulary(
    log: str, cause: str, said: str
) -> None:
    root = _root(log)
    assert root.cause == cause and root.confidence >= 0.5
    assert said in root.fixes[0]


def test_per_sample_lengths_that_differ_are_not_the_batch():
    """question_generation#4: 1216 rows against 1280 targets, 19 against 20 tokens a sample."""
    root = _root("loss_target_mismatch/question_generation-4-s10.log")
    assert "19 against 20" in root.explanation and "lengths" in root.fixes[0]


@pytest.mark.parametrize(
    ("log", "said"),
    [
        # the Windows locale's codec reading a UTF-8 file
        ("text_encoding_mismatch/HeartK-1-gbk-subprocess-reader.log", "encoding='utf-8'"),
        # 0x80 at position 0: a pickle opened as text
        ("text_encoding_mismatch/iCaRL-8-pickle-opened-text-mode.log", "'rb'"),
        # a Python 2 checkpoint through torch.load's unpickler
        (
            "text_encoding_mismatch/pytorch-21743-py2-pickle-ascii-unpickler.log",
            "encoding='latin1'",
        ),
    ],
)
def test_encoding_fixes_follow_the_codec_and_the_byte(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "text_encoding_mismatch" and said in root.fixes[0]


@pytest.mark.parametrize(
    ("log", "said"),
    [
        # the first torch whose compile supports the log's Python, from torch_compile_python.csv
        ("torch_compile_failed/ChatTTS-ui-17-dynamo-py312.log", "torch 2.4 or later"),
        ("torch_compile_failed/ChatTTS-133-no-cxx-compiler-windows.log", "Build Tools"),
    ],
)
def test_compile_failures_say_which_part_failed(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "torch_compile_failed"
    assert said in root.explanation + root.fixes[0]


def test_nan_in_an_estimator_s_input():
    root = _root("nan_in_input_data/archetypes-9-nan-in-csv.log")
    assert root.cause == "nan_in_input_data" and "np.isnan(X).sum()" in root.fixes[0]


@pytest.mark.parametrize(
    "text",
    [
        # yolov5/ultralytics' warning: training goes on without those labels
        "WARNING No labels found in /data/labels.cache, training may not work correctly.\nEpoch 1/100\n",
        # dynamo runs a frame it cannot convert eagerly, and says so as a warning
        "torch._dynamo.convert_frame: [WARNING] WON'T CONVERT forward model.py line 12 due to: "
        "torch._dynamo.exc.Unsupported: call_function\n",
        "UserWarning: flash kernel requires compute capability >= 8.0; falling back to math\n",
    ],
)
def test_warnings_the_run_goes_past_are_not_causes(text: str) -> None:
    assert diagnose.diagnose_text(text).root is None


def test_a_windows_users_folder_is_not_a_mac():
    text = (
        '  File "C:/Users/me/anaconda3/lib/site-packages/torch/cuda/__init__.py", line 239\n'
        "AssertionError: Torch not compiled with CUDA enabled\n"
    )
    root = diagnose.diagnose_text(text).root
    assert root is not None and root.cause == "cpu_only_torch" and "'mps'" not in root.fixes[0]


def test_numpy_2_s_own_removal_message():
    text = "AttributeError: `np.NaN` was removed in the NumPy 2.0 release. Use `np.nan` instead.\n"
    root = diagnose.diagnose_text(text).root
    assert root is not None and root.cause == "package_api_mismatch" and "np.nan" in root.fixes[0]


@pytest.mark.parametrize(
    ("text", "not_said"),
    [
        # a CNN head's 4096 against 1024: powers of two, no encoder's width
        (
            "RuntimeError: mat1 and mat2 shapes cannot be multiplied (32x4096 and 1024x10)\n",
            "another model",
        ),
        # 1024 channels against 512: not a sequence past BERT's positions
        (
            "RuntimeError: The size of tensor a (1024) must match the size of tensor b (512) at non-singleton dimension 1\n",
            "truncation=True",
        ),
        # 144 rows against 64 targets: no per-sample lengths to compare
        (
            "ValueError: Expected input batch_size (144) to match target batch_size (64).\n",
            "different lengths",
        ),
    ],
)
def test_size_heuristics_need_their_evidence(text: str, not_said: str) -> None:
    root = diagnose.diagnose_text(text).root
    assert root is not None and not_said not in root.fixes[0]


@pytest.mark.parametrize(
    ("log", "said"),
    [
        # an operator without an MPS kernel (torch 1.12's "is not current implemented")
        ("mps_op_unsupported/InvokeAI-232-index-put-fallback.log", "PYTORCH_ENABLE_MPS_FALLBACK=1"),
        # numpy's float64 moved to the Apple GPU
        ("mps_op_unsupported/tianshou-1237-float64-to-mps.log", "float32"),
    ],
)
def test_mps_fixes_follow_the_operator_or_the_dtype(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "mps_op_unsupported" and said in root.fixes[0]


@pytest.mark.parametrize(
    ("log", "said"),
    [
        # the exporter names the opset that added the operator
        ("onnx_export_unsupported/nemo-16-round-opset9.log", "opset_version=11"),
        ("onnx_export_unsupported/BitBLAS-115-sdpa-opset13.log", "opset_version=14"),
        # an antialiased resize: no opset of that exporter has it
        (
            "onnx_export_unsupported/vision-6806-resize-antialias-bicubic2d-aa.log",
            "antialias=False",
        ),
    ],
)
def test_onnx_export_fixes_follow_the_message(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "onnx_export_unsupported" and said in root.fixes[0]


@pytest.mark.parametrize(
    ("log", "said"),
    [
        # a DataLoader worker given a dataset holding an LMDB environment (Windows: spawn)
        ("object_not_picklable/parseq-6-lmdb-environment-windows.log", "LMDB"),
        # a lambda in a transform
        ("object_not_picklable/CLIP-151-lambda-in-compose.log", "top level"),
    ],
)
def test_pickling_fixes_name_what_could_not_travel(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "object_not_picklable" and said in root.fixes[0]


@pytest.mark.parametrize(
    ("log", "said"),
    [
        # a whole model saved from a script's __main__, loaded from another script
        ("pickled_class_missing/emotic-15-whole-model-saved-from-main.log", "__main__"),
        # a checkpoint written by a newer torch, loaded by an older one
        ("pickled_class_missing/pytorch-15375-rebuild-parameter-older-torch.log", "torch release"),
        # a worker started by spawn from a notebook
        ("pickled_class_missing/vegas-26-jupyter-windows-integrand-in-main.log", ".py"),
        # a class defined under the script's main guard, which a spawned worker never runs
        ("pickled_class_missing/pytorch-87016-class-under-main-guard.log", "outside the `if"),
    ],
)
def test_a_missing_pickled_class_is_told_by_where_it_was_looked_for(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "pickled_class_missing" and said in root.fixes[0]


# The eleventh symptom sample's threads (`-s11` logs), whose readers found the first fix doubtful
# or wrong; each asserts the general rule, not the thread's words.


def test_a_nan_loss_without_half_precision_leads_with_the_learning_rate():
    """kr-colab/ReLERNN#26: a Keras fp32 run whose loss went NaN; nothing shows fp16."""
    root = _root("fp16_overflow_nan/ReLERNN-26-s11.log")
    assert root.cause == "fp16_overflow_nan"
    assert root.fixes[0].startswith("Lower the learning rate")
    assert "bf16" not in root.fixes[0]


def test_a_nan_loss_in_half_precision_leads_with_bf16():
    root = _root("fp16_overflow_nan/insightface-fp16-grad-scale-zero.log")
    assert root.cause == "fp16_overflow_nan" and "bf16" in root.fixes[0]


def test_three_against_four_without_images_in_sight_is_not_an_rgba_verdict():
    """ruizhecao96/CMGAN#30 (speech): one line, sizes 3 and 4 on axis 0; the RGBA reading needs
    an image in the log (or torchvision's Normalize form, image 4 against 3 means)."""
    root = _root("layer_input_mismatch/CMGAN-30-s11.log")
    assert root.cause == "layer_input_mismatch"
    assert root.confidence < diagnose.POSSIBLE_BELOW
    assert "RGBA" not in " ".join(root.fixes)


def test_an_oom_with_no_training_step_names_loading_as_well_as_the_batch():
    """InternLM/InternLM#79: from_pretrained(device_map="auto").cuda() on one 24 GB GPU."""
    root = _root("cuda_oom/InternLM-79-s11.log")
    assert root.cause == "cuda_oom" and "no .cuda() after it" in root.fixes[0]


def test_a_batch_size_suggested_after_the_error_is_not_the_run_s():
    """shibing624/pycorrector#314: the maintainer's reply "--batch_size 8" follows the OOM."""
    root = _root("cuda_oom/pycorrector-314-s11.log")
    assert root.cause == "cuda_oom"
    assert "batch_size" not in root.figures and "from 8" not in root.fixes[0]


def test_nvcc_refusing_an_architecture_it_dropped_asks_to_remove_it():
    """star-hengxing/cs149-xmake#7: compute_35 with a CUDA 12 nvcc (cuda_arch_support.csv)."""
    root = _root("no_kernel_image/cs149-xmake-7-s11.log")
    assert root.cause == "no_kernel_image"
    assert "removed from CUDA in 12.0" in root.fixes[0] and "Take it out" in root.fixes[0]


@pytest.mark.parametrize(
    ("log", "said"),
    [
        # 108.8 GiB in one request: an input too large for one pass (JingyunLiang/VRT#49)
        ("host_alloc_refused/VRT-49-s11.log", "too large to process at once"),
        # numpy's array of 1,200,623 complex128 rows: hours of audio (kaixxx/noScribe#147)
        ("host_alloc_refused/noScribe-147-s11.log", "shorter segments"),
    ],
)
def test_one_large_host_request_is_told_by_its_size_and_shape(log: str, said: str) -> None:
    root = _root(log)
    assert root.cause == "host_alloc_refused" and said in root.fixes[0]


def test_a_compilers_own_libstdcxx_found_first_is_named():
    """CHIP-SPV/chipStar#403: spack's GCC 10.2.0 lib64 ahead of the runtime the build needs."""
    root = _root("glibcxx_missing/chipStar-403-s11.log")
    assert root.cause == "glibcxx_missing" and "GCC 10.2.0's own" in root.fixes[0]


@pytest.mark.parametrize(
    ("log", "cause", "said"),
    [
        # Cython's size check: the extension was compiled against a newer NumPy (88 against 80)
        ("package_api_mismatch/BeatNet-6-s11.log", "package_api_mismatch", "Upgrade NumPy"),
        # NumPy 2's own guard: a NumPy 1.x build under NumPy 2, the other way round
        ("package_api_mismatch/atrain_core-10-numpy2-s11.log", "package_api_mismatch", "numpy<2"),
        # torch 1.x's own cuDNN check, its CUDNN_VERSION integers read as releases
        ("cudnn_version_mismatch/CenterNet-119-s11.log", "cudnn_version_mismatch", "7.1.2"),
        # Windows' commit limit through Rust's io::Error (safetensors)
        ("host_alloc_refused/ComfyUI-8971-s11.log", "host_alloc_refused", "paging file"),
        # NCCL's IB transport under a vendor's name (NET/IBP)
        ("nccl_network_error/nccl-1664-s11.log", "nccl_network_error", "InfiniBand"),
        # torch's lazy-init assert: device=1, num_gpus=1
        ("gpu_index_out_of_range/ray-54619-s11.log", "gpu_index_out_of_range", "below"),
    ],
)
def test_the_eleventh_samples_messages_in_their_emitters_forms(log: str, cause: str, said: str):
    root = _root(log)
    assert root.cause == cause and said in root.explanation + " ".join(root.fixes)


@pytest.mark.parametrize(
    ("log", "cause", "said"),
    [
        ("fp16_overflow_nan/EDSR-PyTorch-36-s12.log", "fp16_overflow_nan", "bf16"),
        ("host_alloc_refused/D4LCN-13-s12.log", "host_alloc_refused", "checksum"),
        ("cpu_only_torch/LlamaFactory-7986-s12.log", "cpu_only_torch", "'npu'"),
        ("dataloader_worker_killed/tasti-3-s12.log", "dataloader_worker_killed", "num_workers=0"),
        ("cuda_oom/tensorflow-17669-s12.log", "cuda_oom", "batch is already 1"),
        ("disk_full/dust-7395-s12.log", "disk_full", "ephemeral-storage"),
        ("no_kernel_image/rocBLAS-1339-s12.log", "no_kernel_image", "HSA_OVERRIDE_GFX_VERSION"),
        ("illegal_memory_access/faiss-280-s12.log", "illegal_memory_access", ""),
        ("package_api_mismatch/Nonlincausality-11-s12.log", "package_api_mismatch", "tf_keras"),
        ("jax_jaxlib_mismatch/jax-21383-s12.log", "jax_jaxlib_mismatch", ""),
        ("missing_cuda_lib/tensorflow-5090-3-s12.log", "missing_cuda_lib", "nvcc"),
        ("package_api_mismatch/shine-4-s12.log", "package_api_mismatch", "float"),
        ("gpu_too_old_for_feature/FasterTransformer-25-s12.log", "gpu_too_old_for_feature", "5.0"),
    ],
)
def test_the_twelfth_sample_s_verdicts_and_misses(log: str, cause: str, said: str) -> None:
    """From the twelfth symptom sample's readers: its doubtful answers (fp16 named by
    --precision half, a MemoryError while unpickling, an Ascend NPU's CUDA path, a worker's
    segmentation fault, a batch of one, a pod's own storage limit) and the wordings of known
    causes it had no answer for (rocBLAS's Tensile library, CUDA error 77, Keras 3, PJRT, ptxas,
    NumPy 1.24's alias message, cuBLAS's architecture status)."""
    root = _root(log)
    assert root.cause == cause and root.confidence >= 0.5
    assert said in root.fixes[0]


def test_the_review_s_false_alarms_stay_quiet():
    """Words that look like a cause's and are not: 'ascending' is no Ascend NPU, a dunder
    missing from __main__ is no pickled class, a deeper frame's own division by zero is not the
    dataset's length."""
    cpu_only = diagnose.diagnose_text(
        "df.sort_values('loss', ascending=False)\n"
        "AssertionError: Torch not compiled with CUDA enabled\n"
    ).root
    assert cpu_only is not None and "Ascend" not in cpu_only.fixes[0]
    spec = diagnose.diagnose_text("AttributeError: module '__main__' has no attribute '__spec__'\n")
    assert spec.root is None or spec.root.cause != "pickled_class_missing"
    deeper = diagnose.diagnose_text(
        '  File "train.py", line 9, in <module>\n'
        "    mean = total / len(dataset)\n"
        '  File "stats.py", line 3, in __truediv__\n'
        "    return a / b\n"
        "ZeroDivisionError: division by zero\n"
    ).root
    assert deeper is None or deeper.cause != "dataset_empty"

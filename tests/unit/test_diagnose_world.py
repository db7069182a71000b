"""The cases of issue 23, each read from a real thread's log (tests/corpus/logs, SOURCES.md).

Every case here was answered wrongly or not at all before the vocabulary grew: a flash-attn
built for another torch headlined as torchvision; NCCL's bare "unhandled system error" named a
socket problem; JAX's cuDNN check told to shrink the batch; TensorFlow's missing libraries
headlined by the last one; a refused host allocation called an OOM kill.
"""

from __future__ import annotations

import csv
from pathlib import Path

from dlrig import causes, diagnose
from tests.conftest import CORPUS, corpus_root

LOGS = CORPUS / "logs"
OUTSIDE = LOGS / "outside"
# A root named with at least this confidence is a confident answer.
CONFIDENT = 0.5
# Confident answers on outside/ (17 rows, 2026-12-02): the safetensors header really too large,
# a zip read at an offset, a transformers version's position_ids, a torch 1.8 randperm bug.
OUTSIDE_CONFIDENT_AT_MOST = 4


_root = corpus_root


def test_flash_attn_built_for_another_torch_is_the_extension_not_torchvision():
    root = _root("extension_abi_mismatch/flash_attn_setdevice_llamafactory_qwen.log")
    assert root.cause == "extension_abi_mismatch"
    assert "flash_attn" in root.explanation and "c10::cuda::SetDevice" in root.explanation
    assert "flash-attn" in root.fixes[0] and "--no-build-isolation" in root.fixes[0]


def test_every_extension_log_names_its_package():
    for log, package in (
        ("mmcv_ext_tensorbase_data_ptr_bevformer.log", "mmcv"),
        ("detectron2_C_tensorbase_data_ptr.log", "detectron2"),
        ("torch_scatter_version_cuda_parseSchemaOrName.log", "torch-scatter"),
        ("mamba_selective_scan_setdevice.log", "mamba-ssm"),
    ):
        root = _root(f"extension_abi_mismatch/{log}")
        assert root.cause == "extension_abi_mismatch", log
        assert package in root.fixes[0], (log, root.fixes[0])


def test_nccl_unhandled_system_error_alone_is_not_a_socket_verdict():
    root = _root("shm_too_small/nccl-tests-docker-ipc-host.log")
    assert root.cause == "nccl_system_error"
    assert causes.get("nccl_system_error").generic
    assert any("--ipc=host" in fix for fix in root.fixes)
    # with NCCL's WARN line the failing call is named
    named = _root("nccl_wrong_socket_interface/other-nccl-tests-docker-socket-net-host.log")
    assert named.cause == "nccl_wrong_socket_interface"


def test_jax_cudnn_check_names_the_versions_and_never_a_smaller_batch():
    root = _root("jax_cuda_backend_failed/gcbfplus-found-cudnn-8600-built-8906.log")
    assert root.cause == "jax_cuda_backend_failed"
    assert "installed 8.6.0, built against 8.9.6" in root.explanation
    assert "nvidia-cudnn-cu12>=8.9.6" in root.fixes[0]
    assert not any("batch" in fix for fix in root.fixes)


def test_jax_cpu_only_jaxlib_and_outdated_components():
    assert _root("jax_cuda_backend_failed/colabdock-plain-pip-install-jax.log").cause == (
        "jax_cuda_backend_failed"
    )
    outdated = _root("jax_cuda_backend_failed/jax-18027-outdated-cusparse-12002-min-12100.log")
    assert outdated.cause == "jax_cuda_backend_failed" and "cuSPARSE" in outdated.explanation


def test_tensorflow_lists_every_library_and_says_it_ran_on_the_cpu():
    root = _root("tf_gpu_libraries_missing/system76-cuda-11.2-libcusolver-10-libcudnn-8.log")
    assert root.cause == "tf_gpu_libraries_missing"
    assert "libcusolver.so.10" in root.explanation and "libcudnn.so.8" in root.explanation
    skipped = _root("tf_gpu_libraries_missing/tf-54416-libcusolver-so-11-missing-skip-gpu.log")
    assert "ran on the CPU" in skipped.explanation


def test_a_refused_host_allocation_is_not_an_oom_kill_and_an_absurd_size_is_a_bug():
    root = _root("host_alloc_refused/pytorch-pr20618-after-message.log")
    assert root.cause == "host_alloc_refused"
    assert root.figures["tried_bytes"] == 4_000_000_000_000_000
    assert "wrong size, not a shortage" in root.fixes[0]
    small = _root("host_alloc_refused/deeplog-large-dataset-batch.log")
    assert small.cause == "host_alloc_refused" and "wrong size" not in small.fixes[0]


def test_glibcxx_names_the_gcc_and_the_conda_runtime():
    root = _root("glibcxx_missing/migraphx_conda_base_libstdcxx_glibcxx_3.4.30.log")
    assert root.cause == "glibcxx_missing"
    assert "GCC 12.1.0" in root.fixes[0] and "libstdcxx-ng>=12" in root.fixes[0]


def test_ddp_unused_parameters_names_them():
    root = _root("ddp_unused_parameters/peft-lora-esm-pooler-no-grad.log")
    assert root.cause == "ddp_unused_parameters"
    assert "pooler.dense.lora_B" in root.fixes[0]


def test_python_level_import_failures():
    assert _root("local_file_shadows_package/peft-1283-circular-import-peft-py.log").cause == (
        "local_file_shadows_package"
    )
    missing = _root("python_package_missing/jax-6071-no-module-jaxlib.log")
    assert missing.cause == "python_package_missing" and "jaxlib" in missing.fixes[0]


def test_oom_fix_numbers_are_fields():
    result = diagnose.diagnose_paths([LOGS / "cuda_oom/trl-fsdp-sft-rank0-rtx3080.log"])
    assert result.root is not None and result.root.cause == "cuda_oom"
    document = result.to_dict()
    figures = document["causes"][0]["figures"]
    assert figures["needed_bytes"] > figures["usable_bytes"] > 0


def _outside() -> list[dict[str, str]]:
    return list(csv.DictReader((OUTSIDE / "manifest.csv").open(encoding="utf-8")))


def test_crashes_outside_the_vocabulary_are_rarely_answered_with_confidence():
    rows = _outside()
    assert len(rows) >= 10
    confident = []
    for row in rows:
        root = diagnose.diagnose_paths([LOGS / row["file"]]).root
        if root is not None and root.confidence >= CONFIDENT and not causes.get(root.cause).generic:
            confident.append((row["file"], root.cause))
    share = len(confident) / len(rows)
    print(f"\nconfident answers outside the vocabulary: {len(confident)}/{len(rows)} = {share:.1%}")
    for item in confident:
        print("  confident:", item)
    # Most rows here were collected for their surface error (the same message as a cause of the
    # vocabulary, another confirmed cause): confusers, harder than a symptom-sampled set, where
    # the target of 5% applies (the fresh sets below). This count may only go down.
    assert len(confident) <= OUTSIDE_CONFIDENT_AT_MOST


def _blind_set(folder: Path, name: str | None = None) -> tuple[int, int, int, int]:
    """(named right, in the vocabulary, answered with confidence, outside it) over a fresh set's
    manifest: a crash outside the vocabulary counts when its root is confident and specific.
    With `name`, the figures are printed (`pytest -s` shows every set)."""
    rows = list(csv.DictReader((folder / "manifest.csv").open(encoding="utf-8")))
    inside = [r for r in rows if r["cause"] != "outside"]
    # "a|b": the message and its thread make either cause right
    assert all(c in causes.CAUSES for r in inside for c in r["cause"].split("|"))
    right = confident = 0
    for row in rows:
        root = diagnose.diagnose_paths([LOGS / row["file"]]).root
        if row["cause"] != "outside":
            right += bool(root is not None and root.cause in row["cause"].split("|"))
        else:
            confident += bool(
                root is not None
                and root.confidence >= CONFIDENT
                and not causes.get(root.cause).generic
            )
    outside = len(rows) - len(inside)
    if name:
        print(
            f"\n{name} fresh set: top-1 {right}/{len(inside)}, confident outside {confident}/{outside}"
        )
    return right, len(inside), confident, outside


FRESH = LOGS / "fresh"
# Blind, once, on 2026-12-02 with the signatures of commit 50ab7b4 (collected after that work, by
# someone who did not see dlrig's answers): 14 of 24 right, 3 of 17 confident outside. Its misses
# were then read and the messages behind them written from their emitters (8a4b3a7: 20 of 24,
# 1 of 17), so it is no longer blind; these are the floors no later change may fall under.
FRESH_IN_VOCABULARY_FLOOR = 20  # of 24
FRESH_OUTSIDE_CONFIDENT_CEILING = 1  # of 17


def test_the_fresh_blind_set():
    right, inside, confident, outside = _blind_set(FRESH)
    print(
        f"\nfresh blind set: {inside}/{inside + outside} in the vocabulary; top-1 {right}/"
        f"{inside} = {right / inside:.1%}; confident outside the vocabulary "
        f"{confident}/{outside} = {confident / outside:.1%}"
    )
    assert right >= FRESH_IN_VOCABULARY_FLOOR
    assert confident <= FRESH_OUTSIDE_CONFIDENT_CEILING


def test_driver_too_old_without_the_build_in_the_log_names_each_floor_not_the_newest():
    # issue 23: "found version 11040" and nothing about the build asked for R580 (the newest
    # torch's driver); a CUDA 12 build needs 525.60.13
    root = _root("driver_too_old/fooocus-470-driver-11040.log")
    assert root.cause == "driver_too_old"
    first = root.fixes[0]
    assert "CUDA 12.x builds need ≥ 525.60.13" in first and "CUDA 13.x builds need ≥ 580" in first
    assert "CUDA 11.x" not in first  # the driver runs 11.x builds already
    assert "this needs ≥" not in first


def test_a_failure_without_a_known_cause_quotes_its_first_error():
    # precision before recall: no signature explains an import-order segfault, so dlrig names
    # none, and quotes where the failure starts instead of answering "nothing"
    result = diagnose.diagnose_paths([OUTSIDE / "arrow-torch-before-pyarrow-faulthandler.log"])
    assert result.root is None
    assert result.first_error is not None
    assert result.first_error.text == "Fatal Python error: Segmentation fault"
    assert result.to_dict()["first_error"]["line"] == result.first_error.line
    # a run that went well has no "first error", even where it logged an ERROR line
    for manifest in sorted(LOGS.glob("manifest-*.csv")):
        for row in csv.DictReader(manifest.open(encoding="utf-8")):
            if row["cause"] == "none":
                assert diagnose.diagnose_paths([LOGS / row["file"]]).first_error is None, row


FRESH2 = LOGS / "fresh2"


def test_the_second_fresh_blind_set():
    """Collected after all the issue-23 work (commit 8a4b3a7) from threads no set had; measured
    once, blind: 13 of 26 in the vocabulary, 9 of 13 named right, 2 of 13 outside answered with
    confidence. Three of its misses were then written from their emitters (torch's "name '_C' is
    not defined" in a source checkout, JAX's removal notices, bash running a Python file), and
    three of its outside rows got causes of their own, so what follows is the floor, no longer a
    blind figure."""
    right, inside, confident, outside = _blind_set(FRESH2, "second")
    # three outside rows got causes of their own afterwards (an invalid device ordinal, a
    # process group never initialised, a truncated checkpoint)
    assert (inside, inside + outside) == (16, 26)
    assert right >= 14 and confident <= 0


FRESH3 = LOGS / "fresh3"


def test_the_third_fresh_blind_set():
    """Collected on 2026-12-06 after all earlier work, by a collector who did not see dlrig's
    answers: 21 threads, 13 in the vocabulary. Measured once, blind, with the signatures of
    commit 09b0b5e: 10 of 13 named right, 1 of 8 outside answered with confidence. Two misses
    were then fixed in general terms (a loader line pasted without its space, "...so:undefined
    symbol"; a missing module no known package installs is a possible cause, not a confident
    one); the third (a 0-byte model file that surfaced as a mixed-devices error) cannot be seen
    in its log, and a fourth log ends before the crash. What follows is the floor, not blind."""
    right, inside, confident, outside = _blind_set(FRESH3, "third")
    # chinese-clip-279 (PyTorch on Windows has no NCCL) was labelled outside until the cause
    # distributed_backend_unavailable (2026-12-07, from the seventh symptom sample) covered it
    assert (inside, inside + outside) == (14, 21)
    assert right >= 12 and confident == 0


FRESH4 = LOGS / "fresh4"


def test_the_fourth_fresh_blind_set():
    """Collected on 2026-12-06 with symptom-only queries (no query named a message or a cause),
    by a collector who did not see dlrig's answers: 8 threads, 3 in the vocabulary. Measured
    once, blind, at commit e65e48d: 3 of 3 named right, 0 of 5 outside answered with
    confidence. Nothing was changed for it, so it stays a blind figure (a small one)."""
    right, inside, confident, outside = _blind_set(FRESH4, "fourth")
    assert (inside, inside + outside) == (3, 8)
    assert right == 3 and confident == 0


FRESH5 = LOGS / "fresh5"


def test_the_fifth_fresh_blind_set():
    """Collected on 2026-12-06 by two collectors who did not see dlrig's answers, with symptom
    queries over 22 projects (PyTorch, transformers, TRL, DeepSpeed, Lightning, torchtune,
    unsloth, diffusers, ComfyUI, kohya; vLLM, SGLang, TGI, NeMo, Megatron, LLaMA-Factory,
    mmdetection, PaddleSeg, JAX, llama.cpp, ollama): 30 threads, 9 in the vocabulary. Measured
    once, blind, with the signatures of commit 4fb4a72: 5 of 9 named right, 1 of 21 outside
    answered with confidence (a llama.cpp kernel bug's "unspecified launch failure" read as an
    illegal memory access). Two misses were then written in general terms: glibc's translations
    of "Killed" (zh_CN's "已杀死" glued to a progress bar) and llama.cpp's "failed to create
    context" as a possible GPU out-of-memory. "unspecified launch failure" alone became a possible
    cause too (the CUDA error says a kernel raised an exception, not which), so the confident
    answer outside is gone. What follows is the floor, not blind."""
    right, inside, confident, outside = _blind_set(FRESH5, "fifth")
    assert (inside, inside + outside) == (9, 30)
    assert right >= 7 and confident == 0


FRESH6 = LOGS / "fresh6"


def test_the_sixth_fresh_blind_set():
    """Collected on 2026-12-06 after the day's signatures (the emitter sets included), by two
    collectors who did not see dlrig's answers, with symptom queries over training and serving
    projects: 40 threads, 17 in the vocabulary. Measured once, blind, at commit 9316b77: 10 of
    17 named right, 3 of 23 outside answered with confidence (two host-side C++ asserts of an
    old autograd bug read as a kernel's index check; horovod's extension missing a torch
    symbol, fixed by rebuilding it with OpenMPI). The misses were then written in general
    terms (rocBLAS's Tensile library for any reason it cannot be read, HIP's "No compatible
    code objects", Paddle's old cuDNN header check, Python's bare MemoryError while saving, a
    keyword a library's function does not take as a possible version break, host-side asserts
    kept apart from device asserts). One outside row was relabelled (2026-12-07): a script
    written for torch 1.x's launcher under torch 2.0 (--local-rank) is package_api_mismatch;
    a second when extension_not_built was added (eighth symptom sample): detectron2 run from
    its source checkout without being built ("cannot import name '_C' from 'detectron2'").
    What follows is the floor, not blind."""
    right, inside, confident, outside = _blind_set(FRESH6, "sixth")
    assert (inside, inside + outside) == (19, 40)
    assert right >= 18 and confident <= 1


FRESH8 = LOGS / "fresh8"


def test_the_eighth_fresh_blind_set():
    """Collected on 2026-12-07 by a collector who did not see dlrig's answers, by symptom (about
    40 symptom queries), at most three threads per repository, from threads no earlier set
    used: 24 threads, 19 in the vocabulary as it stood. Measured once, blind, at commit
    e31686b: 15 of 19 named right, 2 of 5 outside answered with confidence (FlashAttention's
    "only supports Ampere GPUs or newer" on a V100 as a build without the GPU's kernels, and
    a bare "CUDA driver version is insufficient" from a container that was not given the GPU
    as an old driver). Then: Lightning's own wording of DDP's unused parameters, a training
    loop that raises "loss became NaN", the new cause gpu_too_old_for_feature (the V100 thread
    relabelled to it: its confirmed cause is that cause), and cudart's bare error 35 as a lead,
    not a verdict (it is also what a process that sees no driver gets). Left as misses: a vLLM
    extension built for CUDA 12 under a CUDA 11.8 torch, named as the missing libcudart.so.12,
    and TensorFlow's bare "DNN library is not found" that was a cuDNN version (named as cuDNN
    that cannot be loaded, whose explanation says "or the wrong version"). The floor, not
    blind."""
    right, inside, confident, outside = _blind_set(FRESH8, "eighth")
    assert (inside, outside) == (20, 4)
    assert right >= 18
    assert confident <= 0


FRESH9 = LOGS / "fresh9"


def test_the_ninth_fresh_blind_set():
    """Collected on 2026-12-07 with symptom-only queries (no message, no cause named), at most
    two threads per repository: 8 threads, 5 in the vocabulary. Measured once, blind, at commit
    9720ae1: 1 of 5 named right, 0 of 3 outside answered with confidence. The misses were
    wordings: torch 1.x's "expected device cpu but got device cuda:0", jax < 0.4's "Backend
    'gpu' failed to initialize: NOT_FOUND: Could not find registered platform with name:
    "cuda"" (a CPU-only jaxlib), transformers' lazy import wrapping "cannot import name", and
    "No CUDA GPUs are available" read as a missing driver, where the resolved threads sampled by
    that message were nearly all a CUDA_VISIBLE_DEVICES naming a GPU the machine lacks. The
    floor, not blind."""
    right, inside, confident, outside = _blind_set(FRESH9, "ninth")
    assert (inside, outside) == (5, 3)
    assert right >= 5
    assert confident <= 0


FRESH10 = LOGS / "fresh10"


def test_the_tenth_fresh_blind_set():
    """Collected on 2026-12-07 with short symptom phrases ("crash during evaluation", "colab
    error training", ...), at most two threads per repository: 20 threads, 11 in the
    vocabulary. Measured once, blind, at commit 5747da5: 8 of 11 named right, 1 of 9 outside
    answered with confidence (a ROCm "Memory access fault by GPU" from a PyTorch build the
    user downgraded, named an illegal memory access: the fault it was, with "upgrade or
    downgrade torch/ROCm" among the fixes, but the label stays as collected). Misses: two bare
    NCCL "unhandled system error" logs whose threads found a container's network and its
    shared memory (dlrig names the system error and gives both fixes, which the log cannot
    tell apart), and CUTLASS's "FATAL: this function is for sm80, but was built for sm750"
    (xFormers without kernels for the GPU), now read. The floor, not blind."""
    right, inside, confident, outside = _blind_set(FRESH10, "tenth")
    # one row relabelled when inference_tensor_in_autograd was added (ninth symptom sample): an
    # export under torch 1.9's inference mode, fixed by torch.no_grad, that cause's first fix
    assert (inside, outside) == (12, 8)
    assert right >= 10
    # 2 since inplace_modified_for_grad (eighth symptom sample): graphs4mer#6's in-place error
    # came from a torch_geometric release (downgrading it fixed it); named as the in-place
    # modification it is, with "a library's own code: pin the release that worked" among the
    # fixes, but the label stays as collected
    assert confident <= 2


FRESH11 = LOGS / "fresh11"


def test_the_eleventh_fresh_blind_set():
    """Collected on 2026-12-07 from the projects where people train and serve, by symptom and
    by wording (old and new releases, wrappers, launchers, Windows, ROCm, JAX/XLA, TF), at
    most three per repository: 36 pasted logs in the vocabulary and 28 real crashes outside it
    that look like infrastructure. Measured once, blind, at commit 274c344: 28 of 36 named
    right, 3 of 28 outside answered with confidence. Torch 2.6's weights_only refusal was
    then given a cause of its own (that row relabelled to it: 37 in, 27 outside); DeepSpeed's
    "CUDA_HOME does not exist" is named a missing CUDA toolkit, which the collector read as
    outside (the label stays). The misses (Lightning's "But your
    machine only has: []", xFormers built for a CUDA torch finding "+cpu", NCCL's "Cuda
    failure 'named symbol not found'" on an RTX 5090, HIP's hipErrorInvalidDeviceFunction
    trace, torch 0.4's "Expected object of backend CUDA but got backend CPU", Transformer
    Engine's "[cudnn_frontend] Error", unsloth's "CUDA is not linked properly") were then read
    from their emitters. The floor, not blind. Still missed: an xFormers warning with no
    failure after it (a warning alone is not a crash)."""
    right, inside, confident, outside = _blind_set(FRESH11, "eleventh")
    # 9 rows relabelled on 2026-12-07 when their causes were added or widened (see the
    # manifest; the eighth, ranks at different collectives, after the cause's scope became
    # "uneven data or rank-dependent code"; the ninth, Lightning's "can't create new processes
    # if CUDA is already initialized", when cuda_forked_after_init was added)
    # 041-peft-target-modules-empty was labelled outside until the cause lora_targets_not_found
    # (2026-12-07, from the seventh symptom sample) covered it; 054-conv2d-half-input-float-weight
    # until dtype_mismatch, 064-ultralytics-dataset-images-not-found-windows until dataset_empty
    # (2026-12-07, from the outside clusters of samples 6-9)
    assert (inside, outside) == (49, 15)
    assert right >= 37
    assert confident <= 2


FRESH12 = LOGS / "fresh12"


def test_the_twelfth_fresh_blind_set():
    """Collected on 2026-12-07 by symptom in training and serving projects (Lightning,
    DeepSpeed, vLLM, peft, trl, JAX, mmcv, Megatron-LM, torchtune, kohya, TF/Keras, Paddle,
    ONNX Runtime, fairseq, ROCm, Slurm, dmesg): 33 in the vocabulary and 17 outside as
    collected. Measured once, blind, with the signatures written for the eleventh set and
    none for this one: 27 of 33 named right, 4 of 17 outside answered with confidence (torch
    2.6's weights_only default, again a torch release other than the code's; vLLM's KV cache
    smaller than max_model_len, named GPU memory with vLLM's fix; two collective mismatches
    from rank-dependent code, named as ranks calling different collectives). Then: CUDA's
    "system not yet initialized" (802) as the fabric manager not running, a new cause (one
    outside row relabelled to it), torch 2.6's weights_only refusal as a cause of its own
    (one outside row relabelled to it), ONNX Runtime's LoadLibrary error 126 without the DLL's
    name, and a program's "If you encounter CUDA out of memory" advice is no longer an OOM.
    UCX's "Caught signal 7 (Bus error" under NCCL is read as /dev/shm too small. Still missed:
    two logs whose last error is only in the thread's title, a single NaN loss after overflow
    lines."""
    right, inside, confident, outside = _blind_set(FRESH12, "twelfth")
    # 6 rows relabelled on 2026-12-07 when their causes were added, widened or moved (see the
    # manifest; the sixth, a metric logged with different keys per rank, after the scope of
    # collective_timeout_uneven_data became "uneven data or rank-dependent code"); a seventh,
    # non-square images stacked into one batch, when collate_unequal_sizes was added (eighth
    # symptom sample)
    assert (inside, outside) == (42, 8)
    assert right >= 32
    assert confident <= 3


FRESH13 = LOGS / "fresh13"


def test_the_thirteenth_fresh_blind_set():
    """Collected on 2026-12-07 by symptom phrases only, kept in the proportion the searches
    gave: 10 in the vocabulary, 9 outside. Measured once, blind, with the signatures written
    for the eleventh and twelfth sets: 9 of 10 named right, 2 of 9 outside answered with
    confidence (both "cannot import name 'train' from 'train' (.../site-packages/train/...)":
    a project's own train.py missing from the path, an unrelated PyPI package `train` found
    instead, read as an installed release without the name). Then: such generic script names
    are a lead below 50% whose fix tells the two apart, and an app's "File is not in GGUF
    format" is a model file that is not what it claims to be. The floor, not blind."""
    right, inside, confident, outside = _blind_set(FRESH13, "thirteenth")
    # 014-donut (PyTorch on Windows has no NCCL) was labelled outside until the cause
    # distributed_backend_unavailable (2026-12-07, from the seventh symptom sample) covered it
    assert (inside, outside) == (11, 8)
    assert right >= 11
    assert confident == 0


FRESH14 = LOGS / "fresh14"


def test_the_fourteenth_fresh_blind_set():
    """Collected on 2026-12-07 from serving (vLLM and servers on it, Ollama, llama.cpp, TGI,
    Triton/TensorRT-LLM, LMDeploy, ComfyUI) and multi-GPU/multi-node training (torchrun, FSDP,
    DeepSpeed, Slurm, NeMo, Ray on Kubernetes): 19 in the vocabulary, 13 outside. Measured
    once, blind, with the signatures written for the eleventh to thirteenth sets: 17 of 19
    named right, 0 of 13 outside answered with confidence. Then: the raylet's "Workers (tasks
    / actors) killed due to memory pressure (OOM)", and the caching allocator's "Allocation on
    device 0 would exceed allowed memory" (a memory fraction) with ComfyUI's summary of it.
    The fabric manager cause, added for the twelfth set, then read one row here's "CUDA driver
    error: system not yet initialized" (torch's symmetric memory under vLLM, fixed by turning
    that off) with confidence: that driver-API wording is now a lead naming both."""
    right, inside, confident, outside = _blind_set(FRESH14, "fourteenth")
    # 6 rows relabelled on 2026-12-07 when their causes were added, 2 on 2026-12-08 when
    # llama.cpp's "unknown pre-tokenizer type" joined model_architecture_unknown (see the manifest)
    assert (inside, outside) == (27, 5)
    assert right >= 21
    assert confident == 0


FRESH15 = LOGS / "fresh15"


def test_the_fifteenth_fresh_blind_set():
    """Collected on 2026-12-07 for the failures the earlier sets found little of (ECC, Xid, a
    GPU off the bus, NCCL network errors, Slurm's time limit, DataLoader workers, /dev/kfd,
    glibc, two torch installs): 16 in the vocabulary, 4 outside, several labels unsure as the
    collector said. Measured once, blind, at commit f6f3945: 8 of 16 named right, 2 of 4
    outside answered with confidence (a Kubernetes eviction for node memory, named the host
    out of memory; a DataLoader worker killed by a broken image, named the dead worker).
    Then: DataLoader's SIGBUS message wrapped by a paste, glibc's "version `GLIBC_2.29' not
    found" without its "(required by ...)", docker's "/dev/kfd: no such file or directory".
    Left: NCCL's remote-error and IB completion errors (labelled "system error" by the
    collector, unconfirmed), a libtorch_cuda_cu.so missing after pip overwrote conda's torch
    (named a torch/torchvision mismatch), dmesg Xids 43/31/94 (named the contained ECC error
    Xid 94 reports), JAX's missing cuSPARSE. Since gpu_busy_or_unavailable (2026-12-07, from
    the sixth symptom sample), a third outside is answered with confidence: CUDA's "busy or
    unavailable" from a GPU whose driver asks for a reset (NV_ERR_RESET_REQUIRED, no Xid),
    named that cause with the reset among its fixes; the label (a GSP fault) stays outside."""
    right, inside, confident, outside = _blind_set(FRESH15, "fifteenth")
    assert (inside, outside) == (16, 4)
    assert right >= 11
    assert confident <= 3


def test_killed_in_the_users_language_is_a_sigkill(tmp_path):
    """bash prints strsignal(SIGKILL) in the user's locale (glibc's libc.mo); a progress bar
    that printed no newline leaves it glued to the bar."""
    for line in ("Getötet", "  Processus arrêté", "Убито", "12/50 [00:13<00:40, 1.1it/s]Killed"):
        log = tmp_path / "run.log"
        log.write_text(f"epoch 1 step 10 loss 2.3\n{line}\n", encoding="utf-8")
        root = diagnose.diagnose_paths([log]).root
        assert root is not None and root.cause == "cpu_oom_killed", line
    # a sentence that ends in the word is not the shell's report
    log.write_text("INFO worker 3 was Killed\n", encoding="utf-8")
    root = diagnose.diagnose_paths([log]).root
    assert root is None or root.cause != "cpu_oom_killed"


def test_a_missing_compiled_module_is_installed_the_way_its_table_row_says():
    # NVIDIA/apex#1208: apex installed without its CUDA extensions lacks amp_C; the PyPI
    # package named apex is another project, so the fix is the source build the row names
    root = _root("extension_not_built/apex-1208-no-module-amp-c.log")
    assert root.cause == "extension_not_built" and root.confidence >= CONFIDENT
    assert "--cuda_ext" in root.fixes[0] and "git+https://github.com/NVIDIA/apex" in root.fixes[0]
    assert "pip install amp" not in root.fixes[0]


def test_slurm_memory_notes_that_did_not_kill_are_not_a_crash(tmp_path):
    """slurmstepd says "Exceeded step memory limit at some point." of steps that finished (the
    page cache counts against the cgroup); only "..., being killed" is the kill."""
    log = tmp_path / "slurm.log"
    log.write_text(
        "epoch 3 done, saving checkpoint\nslurmstepd: error: Exceeded step memory limit at some"
        " point.\n",
        encoding="utf-8",
    )
    root = diagnose.diagnose_paths([log]).root
    assert root is None or root.cause != "cpu_oom_killed"
    log.write_text(
        "slurmstepd: error: Step 1141810.0 exceeded memory limit (52917772 > 20971520), being"
        " killed\nsrun: Exceeded job memory limit\n",
        encoding="utf-8",
    )
    root = diagnose.diagnose_paths([log]).root
    assert root is not None and root.cause == "cpu_oom_killed"


FRESH7 = LOGS / "fresh7"


def test_the_seventh_fresh_blind_set():
    """Collected on 2026-12-06 by a collector who did not see dlrig's answers, by symptom, from
    22 projects (threads no earlier set used): 22 threads, 14 in the vocabulary. Measured once,
    blind, at commit d21e5cb: 10 of 14 named right, 2 of 8 outside answered with confidence
    (vLLM's "max seq len is larger than ... KV cache" as GPU memory, and a fp32 run whose loss
    went NaN from too high a learning rate as the NaN-loss cause; both with the confirmed fix
    first or second, so the labels stay "outside" as collected). Then: a quoted `killed` in
    the user's words, TH's "unable to write to file </torch_...>" without an errno, the NaN
    cause's headline widened to divergence, vLLM's context-over-KV-cache fix built from its
    two numbers. Left as misses: LLaVA's "cannot import name" hiding a flash-attn built for
    another torch (the log shows no symbol), and CUDNN_STATUS_NOT_INITIALIZED that was memory
    (dlrig names the cuDNN status, whose first fix is a smaller batch). The floor, not blind."""
    right, inside, confident, outside = _blind_set(FRESH7, "seventh")
    # one row relabelled on 2026-12-07 (vLLM's KV cache check is serving_config_invalid)
    assert (inside, outside) == (15, 7)
    assert right >= 12
    assert confident <= 2


def test_cudart_error_35_alone_is_a_lead_that_names_the_container_case():
    # fresh8's faster-whisper-1229: the container was not given the GPU, and cudart said
    # "driver version is insufficient" (it says the same when it finds no driver at all)
    root = _root("fresh8/faster-whisper-1229-docker-gpu-not-exposed.log")
    assert root.cause == "driver_too_old" and root.confidence < CONFIDENT
    assert "none visible" in root.explanation
    assert any("--gpus all" in fix for fix in root.fixes)
    # the driver API's own code is the driver refusing: still a verdict
    emitted = _root("driver_too_old/human-pose-thcudacheck-error35.log")
    assert emitted.cause == "driver_too_old"


def test_a_library_refusing_a_feature_names_the_capability_it_needs():
    root = _root("fresh8/ms-agent-303-flashattention-ampere-v100.log")
    assert root.cause == "gpu_too_old_for_feature" and root.confidence >= CONFIDENT
    assert any('attn_implementation="sdpa"' in fix for fix in root.fixes)


FRESH16 = LOGS / "fresh16"


def test_the_sixteenth_fresh_blind_set():
    """Collected on 2026-12-07 by symptom from the projects people train and serve with (16
    confirmed threads; the helper found few whole enough in the index's excerpts): 4 in the
    vocabulary, 12 outside as the collector labelled them. Measured once, blind, at commit
    e66b234: 4 of 4 named right, 2 of 12 outside answered with confidence (sglang's NaN
    sampling from a flashinfer bug, named fp16 overflow; a torch 1.5 conv3d illegal memory
    access, which the collector doubted and which illegal_memory_access covers, relabelled).
    Then: multinomial's NaN is a lead, a wrapped vLLM KV-cache line is read across the wrap,
    and three rows were relabelled when their causes were added (a private Hub repository,
    TensorFlow's SIGILL on a CPU without AVX, trust_remote_code), and a fourth when
    layer_input_mismatch was (an LSTM fed 4-D input)."""
    right, inside, confident, outside = _blind_set(FRESH16, "sixteenth")
    assert (inside, outside) == (10, 6)
    assert right == inside
    assert confident <= 1


FRESH17 = LOGS / "fresh17"


def test_the_seventeenth_fresh_blind_set():
    """Collected on 2026-12-07 by symptom (44 confirmed GitHub threads, 2018-2026; the stored
    Q&A pages asked for held no pasted log with a visible confirmation), labelled with the
    vocabulary that day: 33 in it, 11 outside. Measured once, blind, at commit 2bcd071: 24 of 33
    named right, 2 of 11 outside answered with confidence. Then: transformers' "couldn't connect
    to 'https://huggingface.co' to load the files", TGI's "process was signaled to shutdown with
    signal 7" (SIGBUS: shared memory), the Kubernetes device plugin's "could not load NVML
    library"; vLLM's KV-cache-versus-max_model_len check moved to serving_config_invalid (four
    collectors called it a start-up configuration check) and its row was relabelled. Its last
    confident outside answer (bitsandbytes' bare "CUDA Setup failed despite GPU being
    available", which an outdated release also prints on a working setup) is a lead since a
    precision audit of a symptom sample read the same line (2026-12-07). Two outside rows were
    relabelled when dtype_mismatch and layer_input_mismatch were added (apex's deprecated amp
    API leaving a PReLU weight in fp32; a latent vector passed transposed)."""
    right, inside, confident, outside = _blind_set(FRESH17, "seventeenth")
    assert (inside, outside) == (36, 8)
    assert right >= 30
    assert confident == 0


FRESH18 = LOGS / "fresh18"


def test_the_eighteenth_fresh_blind_set():
    """Collected on 2026-12-07 by the symptoms a GPU machine's user words ("crashed after
    hours", "works on one GPU fails on two", "after upgrading torch", "fails on Windows", ...):
    40 confirmed threads, half from 2024-2026; 23 in the vocabulary, 17 outside. Measured once,
    blind, at commit 4caaa29: 18 of 23 named right, 2 of 17 outside answered with confidence (a
    GPU lost after suspend, named a missing driver from "CUDA unknown error"; PCIe ACS breaking
    peer-to-peer, named the index assert it produced). Then: PaddlePaddle 2.x's "Out of memory
    error on GPU 0", transformers' "Your setup doesn't support bf16/gpu", cuBLAS refusing a
    CUDA_R_16BF GEMM, NGC containers' AVX check. Left: a cuDNN "no engine" the thread traced to
    a cuDNN version mismatch (named the cuDNN status it printed). A row labelled outside (a
    TensorRT engine of another TensorRT release) was relabelled when tensorrt_engine_mismatch
    joined the vocabulary from a fifth symptom sample: 24 inside, 16 outside since; two Apple MPS
    operators without a kernel were relabelled when mps_op_unsupported was added (26, 14)."""
    right, inside, confident, outside = _blind_set(FRESH18, "eighteenth")
    assert (inside, outside) == (26, 14)
    assert right >= 25
    assert confident <= 2


FRESH19 = LOGS / "fresh19"


def test_the_nineteenth_fresh_blind_set():
    """Collected on 2026-12-07 by symptom from the training projects (PyTorch, Hugging Face,
    DeepSpeed, Lightning, NeMo, LLaMA-Factory, unsloth, ...) over 100 queries: only 6 confirmed
    threads not used before (the index shows one excerpt per thread, and the short threads whose
    confirmation shows were mostly taken by earlier sets), all in the vocabulary. Measured once,
    blind, at commit 50d73e7: 3 of 6. Then: argparse's/jsonargparse's/click's refusal of an
    option or subcommand as a lead (LitGPT's finetune_lora). Left: ms-swift's "cannot import
    name 'get_vllm_engine'" that an absent vLLM caused, mmengine's placeholder release."""
    right, inside, _confident, outside = _blind_set(FRESH19, "nineteenth")
    assert (inside, outside) == (6, 0)
    assert right >= 4


FRESH20 = LOGS / "fresh20"


def test_the_twentieth_fresh_blind_set():
    """Collected on 2026-12-07 by symptom from the serving and infrastructure projects (vLLM,
    SGLang, Ollama, llama.cpp, JAX, TensorFlow, LMDeploy, the NVIDIA container stack, ...): 8
    confirmed threads, 6 in the vocabulary. Measured once, blind, at commit 50d73e7: 4 of 6
    named right, 0 of 2 outside answered with confidence. Then: Ollama's "symbol lookup for
    cuCtxCreate_v3 failed" (a driver-API entry point the driver lacks) and "your nvidia driver is
    too old or missing"; JAX's XLA "Could not create cudnn handle" as a missing cuDNN first (the
    same thread type as the seventeenth set's jax-ml/jax#16078)."""
    right, inside, confident, outside = _blind_set(FRESH20, "twentieth")
    assert (inside, outside) == (6, 2)
    assert right == inside
    assert confident == 0


FRESH21 = LOGS / "fresh21"


def test_the_twenty_first_fresh_blind_set():
    """Collected on 2026-12-08 by symptom queries only (98 queries, at most 3 threads a
    repository), after the twelfth symptom sample's fixes and the variant hunt: 40 confirmed
    threads, 35 in the vocabulary. Measured once, blind, at commit f7e2c1f: 21 of 35 named right,
    0 of 5 outside answered with confidence (one confident answer inside the vocabulary was the
    wrong cause: mmdet's build-generated mmdet.version read as another release; such modules are
    now left out of the missing-submodule rule). Then: Go's "signal: illegal instruction"
    (Ollama's runner), libgtk-x11-2.0 in os_libraries.csv, the weights-only unpickler's own
    "Can only build Tensor ...", transformers 3's "We assumed ... was a path or url", ptxas's
    "Feature '.bf16' requires .target sm_80"."""
    right, inside, confident, outside = _blind_set(FRESH21, "twenty-first")
    assert (inside, outside) == (35, 5)
    assert right >= 26
    assert confident == 0


# The sets that were sampled by symptom alone (the others asked for a share outside the
# vocabulary), whose labels say how much of the world the vocabulary covers.
SYMPTOM_ONLY = (
    "fresh",
    *(f"fresh{n}" for n in (2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 16, 17, 18, 19, 20, 21)),
)


def test_the_blind_sets_pooled_with_todays_signatures():
    """Every blind set with today's signatures and labels (no longer blind: each set's blind
    figure is in its own test and in docs/commands/diagnose.md), and the share of the
    symptom-sampled threads whose cause is in the vocabulary."""
    right = inside = confident = outside = covered = sampled = 0
    for folder in sorted(LOGS.glob("fresh*")):
        r, i, c, o = _blind_set(folder)
        right, inside, confident, outside = right + r, inside + i, confident + c, outside + o
        if folder.name in SYMPTOM_ONLY:
            covered, sampled = covered + i, sampled + i + o
    print(
        f"\nall blind sets today: top-1 {right}/{inside} = {right / inside:.1%}, confident "
        f"outside {confident}/{outside} = {confident / outside:.1%}; symptom-sampled threads "
        f"in the vocabulary {covered}/{sampled} = {covered / sampled:.1%}"
    )
    assert right / inside >= 0.90
    assert confident / outside <= 0.07

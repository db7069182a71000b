"""The shared cause vocabulary.

`doctor` findings and `diagnose` verdicts name their cause with one of these ids, so a machine
problem found before a run and the crash it produces during a run read the same. Each cause has
a title, a one-paragraph explanation and a default fix; checks and signatures add the specifics
(versions, numbers from the log) on top of the default.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    id: str
    title: str
    explanation: str
    default_fix: str
    # False for causes that slow a run without crashing it (found by monitor and bench, never
    # in a crash log by diagnose).
    crashes: bool = True
    # True for a cause that names what the log says when the log does not say more (NCCL's
    # "unhandled system error"): an honest headline, never the confirmed cause of a thread.
    generic: bool = False


_CAUSES: tuple[Cause, ...] = (
    Cause(
        "cuda_oom",
        "GPU ran out of memory",
        "The CUDA caching allocator could not find room for a new tensor. Parameters, gradients, "
        "optimizer state and activations of the batch together exceed the GPU's memory, or "
        "another process holds part of it, or the allocator's cache is fragmented (memory "
        "reserved by PyTorch but not allocated).",
        "Cut the per-GPU batch size and keep the global batch with gradient accumulation; enable "
        "activation checkpointing or mixed precision; when reserved-but-unallocated memory is "
        "large set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; check `nvidia-smi` for "
        "other processes on the GPU.",
    ),
    Cause(
        "cpu_oom_killed",
        "Host ran out of memory and the kernel killed the process",
        "The Linux OOM killer (or a cgroup/container memory limit) sent SIGKILL to the training "
        "process or one of its workers. Python prints no traceback: the process just dies with "
        "exit code 137 / signal 9, and the kernel log names the victim.",
        "Check `dmesg -T | grep -i 'killed process'`; load less into RAM (memory-map the "
        "dataset, fewer DataLoader workers, smaller prefetch_factor), raise the container's "
        "memory limit, or add RAM/swap.",
    ),
    Cause(
        "driver_too_old",
        "NVIDIA driver too old for the CUDA build",
        "Every CUDA runtime needs a minimum driver. The driver reports the newest CUDA it "
        "supports (nvidia-smi's 'CUDA Version'); a framework built for a newer CUDA cannot start "
        "on it unless minor-version compatibility covers the gap.",
        "Upgrade the NVIDIA driver to at least the version the build's CUDA needs, or install "
        "a framework build for an older CUDA (e.g. `pip install torch --index-url "
        "https://download.pytorch.org/whl/cu118`).",
    ),
    Cause(
        "no_nvidia_driver",
        "No NVIDIA driver loaded",
        "An NVIDIA GPU is on the PCI bus but no NVIDIA kernel driver is bound to it (not "
        "installed, blocked by nouveau, not built for the running kernel, or Secure Boot "
        "refused the unsigned module), so neither nvidia-smi nor CUDA can reach it.",
        "Install the driver for the running kernel (`sudo apt install nvidia-driver-<branch>` "
        "or NVIDIA's runfile), blacklist nouveau, sign the module or disable Secure Boot, then "
        "reboot and confirm with `nvidia-smi`.",
    ),
    Cause(
        "driver_library_mismatch",
        "Kernel module and user-space driver versions differ",
        "The loaded NVIDIA kernel module is a different version from the user-space libraries "
        "(libnvidia-ml, libcuda). This happens when a package upgrade replaces the libraries "
        "under a running module; NVML then fails with 'Driver/library version mismatch'.",
        "Reboot (or unload and reload the nvidia modules), then hold the driver packages "
        "(`sudo apt-mark hold 'nvidia-*' 'libnvidia-*'`) so unattended upgrades cannot do it "
        "again.",
    ),
    Cause(
        "cpu_only_torch",
        "PyTorch is a CPU-only build",
        "The installed torch wheel was built without CUDA (its version ends in '+cpu' or "
        "torch.version.cuda is None), so it cannot use the GPUs even though they work. pip often "
        "picks the CPU wheel from a cache or a pinned index.",
        "Reinstall from a CUDA index: `pip uninstall -y torch && pip install torch "
        "--index-url https://download.pytorch.org/whl/cu126 --no-cache-dir` (pick the cuXXX "
        "your driver supports).",
    ),
    Cause(
        "duplicate_torch_installs",
        "Several PyTorch installs shadow each other",
        "Two copies of torch are importable (pip and conda in one environment, or a user-site "
        "install under ~/.local). Which one Python imports depends on the path order, so the "
        "version you installed is not the one that runs, and compiled extensions fail with "
        "undefined symbols.",
        "Keep one: `pip uninstall torch` (repeat until none is left) and `conda remove "
        "pytorch`, remove ~/.local/lib/python*/site-packages/torch*, then install once.",
    ),
    Cause(
        "missing_cuda_lib",
        "A CUDA library cannot be loaded",
        "A shared library that the framework or an extension was linked against (libcudart, "
        "libcublas, libcudnn, libnccl, libnvrtc...) is not on the loader's path, or is the wrong "
        "major version.",
        "Install the matching CUDA/cuDNN runtime (pip's nvidia-* packages for pip wheels), or "
        "point LD_LIBRARY_PATH at the right CUDA lib64; rebuild extensions against the "
        "framework's CUDA.",
    ),
    Cause(
        "no_kernel_image",
        "The GPU's architecture is not in the build",
        "The framework ships machine code only for a list of GPU architectures (compute "
        "capabilities). A GPU whose compute capability is not in that list, and for which no "
        "compatible PTX is shipped, fails with 'no kernel image is available for execution on "
        "the device'.",
        "Install a build whose architecture list includes the GPU (e.g. cu128 or newer wheels "
        "for Blackwell sm_120; cu126 wheels for Maxwell/Pascal/Volta), or build from source "
        "with TORCH_CUDA_ARCH_LIST set.",
    ),
    Cause(
        "version_mismatch_torch_torchvision",
        "torchvision/torchaudio built for a different torch",
        "torchvision and torchaudio contain compiled operators linked against one exact torch "
        "release and CUDA variant. Paired with another torch, their operators fail to register "
        "('operator torchvision::nms does not exist') or they refuse to load.",
        "Install the companions from the same index and release as torch, e.g. `pip install "
        "torch==2.5.1 torchvision==0.20.1 torchaudio==2.5.1 --index-url "
        "https://download.pytorch.org/whl/cu124`.",
    ),
    Cause(
        "container_toolkit_missing",
        "Docker cannot hand GPUs to containers",
        "`docker run --gpus` needs the NVIDIA Container Toolkit registered as a Docker runtime. "
        'Without it Docker answers \'could not select device driver "" with capabilities: '
        "[[gpu]]'.",
        "Install nvidia-container-toolkit, run `sudo nvidia-ctk runtime configure "
        "--runtime=docker` and `sudo systemctl restart docker`; avoid the snap docker package.",
    ),
    Cause(
        "shm_too_small",
        "Shared memory (/dev/shm) too small",
        "DataLoader workers pass batches to the main process through /dev/shm, and NCCL uses it "
        "between local ranks. Docker gives containers 64 MB by default, which a few image "
        "batches fill; the worker then dies with a bus error.",
        "Start the container with `--ipc=host` or `--shm-size=16g` (Kubernetes: an emptyDir "
        "with medium: Memory on /dev/shm); or use fewer DataLoader workers.",
    ),
    Cause(
        "dataloader_worker_killed",
        "A DataLoader worker was killed",
        "A DataLoader worker process died (killed by signal), usually because the host ran out "
        "of RAM: each worker holds a copy of the dataset object and its prefetched batches.",
        "Lower num_workers and prefetch_factor, avoid Python lists of large objects in the "
        "Dataset (use numpy arrays or memory maps), and check `dmesg` for the OOM killer.",
    ),
    Cause(
        "device_side_assert_label_range",
        "Labels or indices out of range (device-side assert)",
        "A CUDA kernel asserted that an index is in range: most often a class label >= "
        "num_classes or negative in a loss, or a token id >= the embedding size. Because CUDA "
        "reports errors asynchronously, the traceback may point at a later line.",
        "Check labels are in [0, num_classes) and token ids < vocabulary size; rerun with "
        "CUDA_LAUNCH_BLOCKING=1 (or on CPU) to get the exact line.",
    ),
    Cause(
        "illegal_memory_access",
        "Illegal memory access on the GPU",
        "A kernel read or wrote outside its memory. Causes range from a bug in a custom CUDA "
        "extension or a framework release to out-of-range indices and, rarely, faulty hardware.",
        "Rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel; upgrade torch and extensions "
        "(flash-attn, apex, bitsandbytes); try `compute-sanitizer python train.py`; if it "
        "moves between runs and GPUs, check Xid errors in `dmesg`.",
    ),
    Cause(
        "cudnn_status_error",
        "cuDNN failed",
        "cuDNN returned an error status (NOT_INITIALIZED, INTERNAL_ERROR, EXECUTION_FAILED, "
        "NOT_SUPPORTED). It is often an out-of-memory in disguise, or a cuDNN that does not "
        "match the framework's CUDA.",
        "Retry with a smaller batch; align cuDNN with the framework (use the wheel's bundled "
        "cuDNN, remove system cuDNN from LD_LIBRARY_PATH); as a test set "
        "torch.backends.cudnn.enabled = False.",
    ),
    Cause(
        "fp16_overflow_nan",
        "fp16 overflow: loss became NaN/inf",
        "In float16 values above 65504 overflow to inf and become NaN; the loss scaler skips "
        "steps until the scale collapses. Some model families (T5, large activations) overflow "
        "in fp16 regardless of scaling.",
        "Train in bf16 (Ampere or newer) or fp32 for the overflowing layers; lower the "
        "learning rate, clip gradients, and check the data for inf/NaN.",
    ),
    Cause(
        "gpu_ecc_error",
        "Uncorrectable GPU memory (ECC) error",
        "The GPU detected an error in its memory that ECC could not correct. The process using "
        "it is killed; the page is retired or the row remapped at the next reset. Repeated "
        "errors mean failing hardware.",
        "Drain the node, reset the GPU or reboot so the row remap takes effect, run `dcgmi "
        "diag -r 3`; if errors recur or remapping fails, RMA the GPU.",
    ),
    Cause(
        "xid_error",
        "NVIDIA driver reported an Xid error",
        "Xid messages in the kernel log are the driver's error reports. Their code says whether "
        "the application, the driver or the hardware is at fault.",
        "Look the code up (`dlrig doctor --explain gpu.xid_events`, NVIDIA's Xid catalogue) and "
        "act on its severity: restart the job for application Xids, reset or drain for "
        "hardware ones.",
    ),
    Cause(
        "gpu_fell_off_bus",
        "GPU fell off the bus (Xid 79)",
        "The GPU stopped answering on PCIe. Most common reasons are power (PSU, cables), "
        "overheating, a bad riser or slot, or old system BIOS. It needs a reboot at least.",
        "Reboot; reseat the card and its power cables, check the PSU and cooling, update the "
        "system BIOS; if it recurs on the same GPU, RMA it.",
    ),
    Cause(
        "nccl_timeout",
        "A collective timed out (NCCL watchdog)",
        "A rank waited in a collective longer than the process-group timeout. Usually one rank "
        "is slow or stuck (rank-0-only preprocessing, evaluation, checkpointing, or it crashed), "
        "not the network.",
        "Find the rank that did not arrive (look for its own error earlier in the log); move "
        "long rank-0 work before init_process_group or raise the timeout "
        "(init_process_group(timeout=timedelta(hours=1))).",
    ),
    Cause(
        "nccl_wrong_socket_interface",
        "NCCL used the wrong network interface",
        "NCCL picks a socket interface automatically and may choose a docker bridge, a veth or "
        "loopback that other nodes cannot reach, so bootstrap or data connections fail.",
        "Set NCCL_SOCKET_IFNAME to the interface the nodes share (e.g. NCCL_SOCKET_IFNAME=eth0 "
        "or ^docker,lo) and GLOO_SOCKET_IFNAME likewise; run containers with host networking.",
    ),
    Cause(
        "collective_timeout_uneven_data",
        "Ranks got different amounts of data",
        "When ranks process different numbers of batches, the ranks that finish early wait in "
        "a collective the others never reach, and it times out (often at the end of an epoch or "
        "in evaluation).",
        "Give every rank the same number of batches: DistributedSampler with drop_last=True, "
        "equal shards, or the DDP join() context manager for uneven inputs.",
    ),
    Cause(
        "port_in_use",
        "Rendezvous port already in use",
        "The rendezvous store could not bind MASTER_PORT because another process (often a "
        "stale run) holds it.",
        "Pick a free port (`--master_port=29501` / MASTER_PORT), or kill the stale processes "
        "(`ss -ltnp | grep 29500`).",
    ),
    Cause(
        "disk_full",
        "Disk full",
        "A write failed with 'No space left on device': checkpoints, caches (~/.cache, /tmp) or "
        "logs filled the filesystem.",
        "Free space or write checkpoints elsewhere; point HF_HOME/TMPDIR at a large disk; keep "
        "fewer checkpoints (save_total_limit).",
    ),
    Cause(
        "too_many_open_files",
        "Too many open files",
        "The process hit its open-file limit. DataLoader workers sharing tensors through file "
        "descriptors ('received 0 items of ancdata') and many dataset files exhaust the default "
        "limit of 1024.",
        "Raise the limit (`ulimit -n 65536`, or LimitNOFILE in the service/container), or use "
        "torch.multiprocessing.set_sharing_strategy('file_system').",
    ),
    Cause(
        "extension_abi_mismatch",
        "A compiled extension was built for another torch",
        "C++/CUDA extensions (flash-attn, xformers, apex, mmcv, detectron2, torch-scatter, "
        "bitsandbytes, vLLM's _C, ...) link against torch's C++ ABI, which changes with every "
        "torch release and with the C++11-ABI flag. Imported beside another torch, the "
        "extension's library asks for a symbol that torch no longer exports and the loader "
        "refuses it ('undefined symbol: _ZN3c10...').",
        "Reinstall the extension in a build made for the installed torch (`pip install "
        "--force-reinstall --no-cache-dir --no-build-isolation <package>`), or install the torch "
        "release it was built for.",
    ),
    Cause(
        "glibcxx_missing",
        "The C++ runtime (libstdc++) or glibc is older than a library needs",
        "A compiled library was built with a newer GCC or glibc than the one the loader finds: "
        "'version `GLIBCXX_3.4.30' not found'. Under conda, the environment's own libstdc++ is "
        "often older than the system's (or the reverse), and whichever is found first wins.",
        "Give the environment a new enough libstdc++ (`conda install -c conda-forge "
        "'libstdcxx-ng>=12'`), or make the loader find the newer one first; for glibc, use a "
        "newer OS or a wheel built for this one (manylinux tag).",
    ),
    Cause(
        "ld_library_path_shadowing",
        "LD_LIBRARY_PATH shadows the CUDA libraries the wheel ships",
        "pip's torch/TF/JAX wheels bring their own cuDNN, cuBLAS and NCCL (the nvidia-* "
        "packages). A system CUDA or cuDNN directory on LD_LIBRARY_PATH is searched first, so "
        "the framework loads a copy of another version and fails with undefined symbols or a "
        "version mismatch.",
        "Remove the system CUDA/cuDNN directories from LD_LIBRARY_PATH for this job (`unset "
        "LD_LIBRARY_PATH`, or drop /usr/local/cuda*/lib64 from it); the wheel finds its own "
        "libraries without it.",
    ),
    Cause(
        "ddp_unused_parameters",
        "DDP: some parameters got no gradient",
        "DistributedDataParallel waits for a gradient of every parameter before it reduces a "
        "bucket. When the forward pass does not use some parameters (a branch not taken, a "
        "frozen head, an output not in the loss), their buckets never finish and the next "
        "iteration fails with 'Expected to have finished reduction in the prior iteration'.",
        "Make every parameter take part in the loss, freeze the unused ones "
        "(requires_grad=False) before wrapping, or pass find_unused_parameters=True to DDP "
        "(Lightning: strategy='ddp_find_unused_parameters_true'; HF Trainer: "
        "ddp_find_unused_parameters=True). TORCH_DISTRIBUTED_DEBUG=DETAIL names the parameters.",
    ),
    Cause(
        "tensors_on_mixed_devices",
        "Tensors on different devices",
        "An operation got inputs on two devices (a GPU and the CPU, or two GPUs): a model moved "
        "to the GPU with a batch left on the CPU, a tensor created inside forward() without a "
        "device, or a module device_map split across GPUs.",
        "Move the model and every input to one device (`model.to(device)`, "
        "`batch = batch.to(device)`); create new tensors with `device=x.device`; register "
        "constant tensors as buffers so `.to()` moves them.",
    ),
    Cause(
        "shm_permission_denied",
        "No permission to use shared memory (/dev/shm)",
        "Python's multiprocessing (semaphores, DataLoader workers) and torch's tensor sharing "
        "create files in /dev/shm. When /dev/shm is missing, read-only or not writable by the "
        "user (some containers, HPC nodes and sandboxes), they fail with 'Permission denied'.",
        "Make /dev/shm a writable tmpfs (`ls -ld /dev/shm` should show drwxrwxrwt; in "
        "containers --ipc=host or a tmpfs mount); as a workaround use DataLoader num_workers=0.",
    ),
    Cause(
        "nccl_system_error",
        "NCCL hit a system error",
        "NCCL reports 'unhandled system error' when a system call failed: creating a shared "
        "memory segment, opening a socket, registering memory with the network card. The "
        "message alone does not say which call; the 'NCCL WARN' line before it does.",
        "Rerun with NCCL_DEBUG=INFO to see the failing call; in a container start it with "
        "--ipc=host (or --shm-size=16g) and host networking; on several nodes set "
        "NCCL_SOCKET_IFNAME to the interface they share.",
        generic=True,
    ),
    Cause(
        "host_alloc_refused",
        "The host refused a memory allocation",
        "A request for host memory (RAM) failed: the allocation was larger than the memory "
        "that was free or that the overcommit policy and limits allow. The process raises an "
        "error itself: nothing was killed.",
        "Check the size it asked for: far more than the machine's RAM is a bug (a shape or "
        "dtype computed wrong); otherwise load less into RAM (memory-map the data, fewer "
        "workers) or raise the container's memory limit.",
    ),
    Cause(
        "jax_cuda_backend_failed",
        "JAX could not start its CUDA backend",
        "jaxlib's CUDA plugin checks the CUDA, cuDNN, cuBLAS and NCCL it finds against those it "
        "was built with, and the driver against them; when one is missing or too old, or only "
        "the CPU jaxlib is installed, JAX falls back to the CPU or fails.",
        'Install JAX with its CUDA wheels in one command (`pip install -U "jax[cuda12]"` or '
        '`"jax[cuda13]"`), remove system CUDA/cuDNN directories from LD_LIBRARY_PATH, and '
        "keep the driver at least at the CUDA release the plugin needs.",
    ),
    Cause(
        "tf_gpu_libraries_missing",
        "TensorFlow could not load its GPU libraries and runs on the CPU",
        "TensorFlow loads CUDA, cuBLAS, cuDNN and friends at start-up by their exact sonames "
        "(libcudart.so.11.0, libcudnn.so.8). If any is missing it prints 'Cannot dlopen some "
        "GPU libraries', skips registering the GPUs and trains on the CPU.",
        "Install the CUDA and cuDNN versions this TensorFlow release was built for (TF >= 2.15: "
        "`pip install 'tensorflow[and-cuda]'`), or point LD_LIBRARY_PATH at them; check with "
        "python -c \"import tensorflow as tf; print(tf.config.list_physical_devices('GPU'))\".",
    ),
    Cause(
        "torchvision_not_imported",
        "torchvision's operators are not registered in this process",
        "A TorchScript or exported model calls torchvision operators (torchvision::nms, "
        "roi_align), which exist only once torchvision's library is loaded: in Python by "
        "`import torchvision`, in C++ by linking libtorchvision. Loading the model without it "
        "fails with 'Unknown builtin op: torchvision::nms'.",
        "`import torchvision` before torch.jit.load (or torch.export.load); in a C++ program "
        "link libtorchvision and keep its registration (e.g. -Wl,--no-as-needed).",
    ),
    Cause(
        "job_time_limit",
        "The scheduler stopped the job at its time limit",
        "The batch scheduler cancelled the job when it reached its wall-clock limit (Slurm: "
        "'CANCELLED ... DUE TO TIME LIMIT'). Nothing in the job failed.",
        "Ask for more time (sbatch --time), or save checkpoints often and resume in a follow-up "
        "job (Slurm's --signal=B:USR1@300 gives the job warning before the end).",
    ),
    Cause(
        "python_package_missing",
        "A Python module is not installed in the Python that ran",
        "The import failed because no installed package provides the module in the interpreter "
        "that ran the script: it was never installed, was installed into another environment "
        "(pip of one Python, torchrun or a notebook kernel of another), or its name is "
        "misspelt.",
        "Install it with the interpreter that runs the job (`python -m pip install <package>`; "
        "compare `which python` with the launcher's), or correct the module name.",
    ),
    Cause(
        "package_api_mismatch",
        "The code imports a name the installed package does not have",
        "The script imports a function, class or submodule that the installed release of a "
        "package does not provide: the code (an example from the main branch, a tutorial, "
        "another package) was written for an older or newer release, or the name is misspelt.",
        "Install the release the code was written for (the requirements file of the project, "
        "or `pip install -U <package>` when the name is new), or use the example from the "
        "installed release; check the spelling against the package's API.",
    ),
    Cause(
        "local_file_shadows_package",
        "A local file or folder hides the installed package",
        "Python imports from the current directory and the script's folder first. A file named "
        "like a package (peft.py, torch/ in a source checkout, vllm/ in its repository) is "
        "imported instead of the installed package, which fails as a circular import or a "
        "missing compiled part.",
        "Rename the local file (and delete its __pycache__), or run from another directory than "
        "the package's source checkout.",
    ),
    Cause(
        "cudnn_version_mismatch",
        "The cuDNN that loaded is not the one the framework was built with",
        "TensorFlow and XLA check the cuDNN they load against the one they were compiled with. "
        "An older copy found first (a system cuDNN, another CUDA's lib64 on LD_LIBRARY_PATH, a "
        "conda package) makes the check fail, and the framework refuses cuDNN.",
        "Install the cuDNN the build asks for (its tested-build table; TF >= 2.15: pip install "
        "'tensorflow[and-cuda]'), and make sure no older copy is found first: `ldconfig -p | grep "
        "cudnn`, `echo $LD_LIBRARY_PATH`.",
    ),
    Cause(
        "checkpoint_corrupt",
        "The checkpoint or weights file is truncated or not the file",
        "The file being loaded is not a whole checkpoint: a download or a save that stopped "
        "part-way (a full disk, a killed job), a Git LFS pointer checked out instead of the "
        "weights (it starts with 'version https://git-lfs'), or an HTML page saved in its "
        "place.",
        "Download or save it again and compare its size with the source's; for a Git LFS "
        "repository run `git lfs install && git lfs pull`; `head -c 100 FILE` shows what the "
        "file really is.",
    ),
    Cause(
        "state_dict_mismatch",
        "The checkpoint does not fit the model",
        "load_state_dict found parameters the model does not have, misses ones it has, or "
        "finds them with other shapes: a checkpoint of another model or configuration (another "
        "number of classes, another size), or one saved through DataParallel/DDP whose keys "
        "start with 'module.'.",
        "Build the model with the checkpoint's configuration (same variant, same number of "
        "classes); strip a 'module.' prefix from the keys; load a new head with "
        "strict=False and only when that is intended.",
    ),
    Cause(
        "process_group_not_initialized",
        "Distributed code ran without a process group",
        "DistributedDataParallel, SyncBatchNorm, a DistributedSampler or a collective ran in a "
        "process where torch.distributed.init_process_group was never called: the script was "
        "started with plain `python` instead of a launcher, or its distributed setup was "
        "skipped.",
        "Start it with a launcher (`torchrun --nproc_per_node=N train.py`, accelerate launch, "
        "srun) so init_process_group runs, or for one GPU turn the distributed parts off "
        "(plain BatchNorm, no DDP wrapper).",
    ),
    Cause(
        "gpu_index_out_of_range",
        "The job asked for a GPU that does not exist here",
        "CUDA numbers the GPUs a process sees from 0 (after CUDA_VISIBLE_DEVICES); asking for "
        "an index past the last one ('cuda:1' on a one-GPU machine, more processes per node "
        "than GPUs) fails with 'invalid device ordinal'.",
        "Ask for an index below the number of visible GPUs (`nvidia-smi -L`, and "
        "CUDA_VISIBLE_DEVICES renumbers from 0), and start no more processes per node than "
        "GPUs (--nproc_per_node).",
    ),
    Cause(
        "input_pipeline_bound",
        "The GPU waits for data",
        "The training step finishes faster than the input pipeline produces the next batch, so "
        "the GPU sits idle between steps: too few DataLoader workers, CPU-heavy decoding and "
        "augmentation, or a slow disk or network filesystem.",
        "Raise DataLoader num_workers (up to the CPU cores per GPU), set pin_memory=True and "
        "persistent_workers=True, move decoding to the GPU (DALI, torchvision.io on CUDA) or "
        "pre-pack the dataset into large shards on local NVMe; `dlrig bench dataloader` finds "
        "the best settings.",
        crashes=False,
    ),
    Cause(
        "gpu_throttling",
        "The GPU slows its clocks",
        "The GPU lowers its clocks when it reaches its power limit, its temperature limit, or "
        "when the board asserts a hardware slowdown (power brake from the PSU, overheating). "
        "Training runs proportionally slower.",
        "Check cooling (airflow, fan curve, dust, blanking panels), the power limit "
        "(`nvidia-smi -q -d POWER`; restore it with `sudo nvidia-smi -pl <default>`), and for "
        "hardware slowdown the PSU capacity and the GPU's power cables.",
        crashes=False,
    ),
    Cause(
        "pcie_link_degraded",
        "A GPU's PCIe link runs below its rated speed",
        "The link trained at fewer lanes or a lower generation than both ends support: a card "
        "in a narrower slot, a riser or extender, a BIOS bifurcation setting, or a bad contact. "
        "Host-device copies (data loading, offload) run proportionally slower.",
        "Reseat the card, move it to a full x16 slot attached to the CPU, remove risers, check "
        "the BIOS PCIe settings; confirm with `dlrig bench memory` (host-to-device bandwidth).",
        crashes=False,
    ),
)

CAUSES: dict[str, Cause] = {cause.id: cause for cause in _CAUSES}


def get(cause_id: str) -> Cause:
    """The cause with this id; KeyError names the known ids."""
    try:
        return CAUSES[cause_id]
    except KeyError:
        raise KeyError(f"unknown cause {cause_id!r}; known: {', '.join(sorted(CAUSES))}") from None

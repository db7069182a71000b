"""Causes in the install: the driver, CUDA and its libraries, compiled extensions, the C++
runtime, the frameworks' GPU builds, and Python packages that are missing, too old or shadowed."""

from __future__ import annotations

from dlrig.causes.model import Cause

CAUSES: tuple[Cause, ...] = (
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
        "refused the unsigned module), so neither nvidia-smi nor CUDA can reach it; or the "
        "process cannot reach the host's driver (a container started without GPU access, "
        "WSL without GPU support), or there is no NVIDIA GPU at all.",
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
        "fabric_manager_not_running",
        "NVSwitch fabric not ready: the fabric manager is not running",
        'On HGX/DGX boards the GPUs talk through NVSwitch, and CUDA stays "not yet '
        'initialized" (cudaErrorSystemNotReady, 802) until nvidia-fabricmanager, the same '
        "version as the driver, has set the fabric up: after a driver upgrade without the "
        "matching fabric manager, or with the service stopped, every CUDA program fails at start.",
        "sudo systemctl enable --now nvidia-fabricmanager (its version must equal the driver's "
        "exactly: install the nvidia-fabricmanager package of the driver's branch pinned to its "
        "version), then check nvidia-smi -q | grep -i fabric.",
    ),
    Cause(
        "no_amdgpu_driver",
        "No AMD GPU driver (amdgpu with /dev/kfd) loaded",
        "ROCm reaches an AMD GPU through the amdgpu kernel driver's compute interface, /dev/kfd. "
        "Without it (driver not installed, not built for the running kernel, or the device not "
        "passed into a container) no ROCm program sees a GPU.",
        "Install the amdgpu driver for the running kernel (`sudo apt install amdgpu-dkms`, "
        "then reboot); in a container pass `--device=/dev/kfd --device=/dev/dri`.",
    ),
    Cause(
        "gpu_device_permission",
        "No permission to open the GPU device files",
        "The GPU's device files (/dev/kfd and /dev/dri/renderD* for AMD, /dev/nvidia* for "
        "NVIDIA) are there, but this user cannot open them read-write, so the framework sees no "
        "GPU although tools run as root do.",
        "Add the user to the groups that own the devices (`sudo usermod -aG render,video "
        "$USER`, then log in again); in a container add `--group-add video --group-add render`.",
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
        "A CUDA library or toolkit cannot be found, or is another CUDA version",
        "A shared library that the framework or an extension was linked against (libcudart, "
        "libcublas, libcudnn, libnccl, libnvrtc...) is not on the loader's path, or is the wrong "
        "major version; or a build looked for the CUDA toolkit (nvcc, CUDA_HOME) and found none, "
        "or found one of another CUDA version than the framework's.",
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
        "jax_jaxlib_mismatch",
        "jax and jaxlib are versions that do not go together",
        "jax checks at import that jaxlib (and the CUDA plugin) is neither older than the "
        "minimum it needs nor newer than itself; upgrading one of them alone (`pip install -U "
        "jaxlib`, a plugin upgrade, a pinned requirements file) breaks the pair.",
        'Install them together: `pip install -U "jax[cuda12]"` (or `"jax[cuda13]"`, or plain '
        "`jax` for the CPU), which pins jaxlib and the plugin to the jax release.",
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
        "os_library_missing",
        "A shared library of the operating system is not installed",
        "A Python package loads a library the operating system provides, not pip: OpenCV's GUI "
        "wheel needs libGL.so.1 and GLib, soundfile needs libsndfile, DeepSpeed's async I/O "
        "needs libaio. Slim container images and minimal servers leave them out.",
        "Install the system package that provides it (Debian/Ubuntu: `apt-get install -y "
        "libgl1 libglib2.0-0` for OpenCV), or use a wheel that does not need it "
        "(opencv-python-headless on a server).",
    ),
    Cause(
        "tensorrt_engine_mismatch",
        "A TensorRT engine was built by another TensorRT or for another GPU",
        "A serialized TensorRT engine (a .engine or .plan file, TensorRT-LLM's rank engines) is "
        "compiled for the TensorRT release that built it and, by default, for that GPU model: "
        "another TensorRT refuses it ('Version tag does not match', 'not compatible with this "
        "version of TensorRT') and another GPU may too ('generated on an incompatible device').",
        "Rebuild the engine with the TensorRT (and on the GPU) that runs it: trtexec "
        "--onnx=model.onnx --saveEngine=model.engine, the framework's export or build command "
        "(trtllm-build, a YOLO export); or install the TensorRT release the engine was built "
        "with. Engines meant to move between releases or GPUs are built version- or "
        "hardware-compatible (TensorRT >= 8.6).",
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
        "The installed release of a package is not the one the code was written for",
        "The code uses a function, class, submodule, argument or default that the installed "
        "release of a package does not have or has changed (or a package checks its "
        "dependency's version and refuses it): the code (an example from the main branch, a "
        "tutorial, another package) was written for an older or newer release, or the name is "
        "misspelt.",
        "Install the release the code was written for (the requirements file of the project, "
        "or `pip install -U <package>` when the name is new), or use the example from the "
        "installed release; check the spelling against the package's API.",
    ),
    Cause(
        "weights_only_load_refused",
        "torch.load refused the checkpoint's objects (weights_only, torch >= 2.6's default)",
        "Since PyTorch 2.6 torch.load unpickles only tensors and plain containers unless told "
        "otherwise (weights_only=True by default); a checkpoint that also pickled a class (a "
        "model object, a config such as OmegaConf's ListConfig, numpy scalars, a training "
        "library's own types) is refused. Code written for an older torch loads it without "
        "the argument and fails.",
        "For a checkpoint from a source you trust: torch.load(path, weights_only=False), or "
        "allow its classes with torch.serialization.add_safe_globals([...]) (the error names "
        "them); or upgrade the library that loads it (most have), or pin torch<2.6.",
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
        "model_architecture_unknown",
        "The installed library does not know this model's architecture",
        "A model names its architecture in its config (model_type, architectures; GGUF's "
        "general.architecture). A transformers, vLLM, llama.cpp or Ollama release older than the "
        "model has no code for it and refuses it; a model that ships its own code instead asks "
        "for trust_remote_code.",
        "Upgrade the library that loads the model to a release that supports it (pip install "
        "-U transformers; a newer vLLM, llama.cpp or Ollama), or, for a model that ships its "
        "own code and that you trust, pass trust_remote_code=True (vLLM: --trust-remote-code).",
    ),
    Cause(
        "cpu_instruction_unsupported",
        "The build needs CPU instructions this CPU lacks (Illegal instruction)",
        'A binary compiled for a newer instruction set stops with SIGILL ("Illegal '
        "instruction\", exit code 132) on a CPU without it: TensorFlow's wheels need AVX from "
        "1.6 on, other builds need AVX2 or AVX-512; on ARM boards OpenBLAS can pick a core type "
        "the CPU does not have. Old CPUs, some virtual machines that hide AVX, and emulation "
        "(Rosetta, QEMU) hit it.",
        "Check what the CPU offers (grep -o -w 'avx2\\|avx' /proc/cpuinfo | sort -u); use a "
        "build for it (an older TensorFlow, a community no-AVX wheel, or a source build), expose "
        "the host's CPU flags to the VM (host-passthrough), or on ARM set OPENBLAS_CORETYPE=ARMV8 "
        "before starting Python.",
    ),
    Cause(
        "distributed_backend_unavailable",
        "This PyTorch build lacks the distributed backend the run asked for",
        "torch.distributed's backends are compiled in: PyTorch's Windows and macOS builds have no "
        "NCCL (only Gloo), CPU builds none that use a GPU, most builds no MPI, and the Windows "
        "builds since 2.4 no libuv for torchrun's rendezvous store, which 2.4 made the default.",
        'Use a backend the build has: backend="gloo" on Windows and macOS (or run on Linux or '
        "WSL2 for NCCL); USE_LIBUV=0 before torchrun on Windows; a CUDA build of torch for NCCL; "
        "a one-GPU run needs no process group at all.",
    ),
    Cause(
        "extension_not_built",
        "The package is installed without its compiled extension",
        "The package's Python files are there but its C++/CUDA extension is not: it was built "
        "from source without the compiler, CUDA toolkit or flag the extension needs (the build "
        "then skips it quietly), or the code runs from the package's source folder, which shadows "
        "the installed build.",
        "Reinstall it so that the extension builds, and read the build's output (Horovod: "
        "HOROVOD_WITH_PYTORCH=1 makes a failed build an error); run from outside the source "
        "folder, or build it in place (pip install -e .).",
    ),
    Cause(
        "torch_wheel_unavailable",
        "pip finds no torch wheel for this Python, platform or version",
        "PyPI and download.pytorch.org publish torch wheels for some Python releases, platforms "
        "and versions only: a Python newer than the torch release (or 32-bit Python), a version "
        "pin that never existed, or a +cuXXX build asked of PyPI (CUDA variants live on "
        "download.pytorch.org's indexes) finds nothing to install.",
        "Install a torch release that supports this Python (or a Python the pinned release "
        "supports, e.g. with conda or uv), from the index of its CUDA variant: `dlrig provision "
        "env` writes one that resolves.",
    ),
)

"""Causes in the resources a run is given: GPU and host memory, shared memory, disk, file
handles and the scheduler's time limit."""

from __future__ import annotations

from dlrig.causes.model import Cause

CAUSES: tuple[Cause, ...] = (
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
        "shm_too_small",
        "Shared memory (/dev/shm) too small",
        "DataLoader workers pass batches to the main process through /dev/shm, and NCCL uses it "
        "between local ranks. Docker gives containers 64 MB by default, which a few image "
        "batches fill; the worker then dies with a bus error.",
        "Start the container with `--ipc=host` or `--shm-size=16g` (Kubernetes: an emptyDir "
        "with medium: Memory on /dev/shm); or use fewer DataLoader workers.",
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
        "dataloader_worker_killed",
        "A DataLoader worker was killed",
        "A DataLoader worker process died (killed by signal), usually because the host ran out "
        "of RAM: each worker holds a copy of the dataset object and its prefetched batches.",
        "Lower num_workers and prefetch_factor, avoid Python lists of large objects in the "
        "Dataset (use numpy arrays or memory maps), and check `dmesg` for the OOM killer.",
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
        "job_time_limit",
        "The scheduler stopped the job at its time limit",
        "The batch scheduler cancelled the job when it reached its wall-clock limit (Slurm: "
        "'CANCELLED ... DUE TO TIME LIMIT'). Nothing in the job failed.",
        "Ask for more time (sbatch --time), or save checkpoints often and resume in a follow-up "
        "job (Slurm's --signal=B:USR1@300 gives the job warning before the end).",
    ),
    Cause(
        "gpu_busy_or_unavailable",
        "The GPU is busy or unavailable to this process",
        "CUDA could not create a context on any GPU it may use (cudaErrorDevicesUnavailable): "
        "the GPU is in Exclusive_Process (or Prohibited) compute mode and another process "
        "holds it, a scheduler or container gave this process no free GPU, or a vGPU has no "
        "licence for compute.",
        "See who holds the GPU and its mode: nvidia-smi --query-gpu=index,compute_mode "
        "--format=csv and nvidia-smi's process list; wait for or stop that process, or pick a "
        "free GPU (CUDA_VISIBLE_DEVICES; on a cluster, the GPU the scheduler gave you rather "
        "than cuda:0); with root, nvidia-smi -i N -c DEFAULT lets processes share it.",
    ),
)

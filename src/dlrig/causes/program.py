"""Causes in the training program and its processes: bad inputs to a kernel, numerics,
checkpoints, and the distributed setup (NCCL, ports, DDP, process groups)."""

from __future__ import annotations

from dlrig.causes.model import Cause

CAUSES: tuple[Cause, ...] = (
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
        "The loss became NaN/inf: fp16 overflow or diverging training",
        "In float16 values above 65504 overflow to inf and become NaN; the loss scaler skips "
        "steps until the scale collapses. Some model families (T5, large activations) overflow "
        "in fp16 regardless of scaling. In bf16 or fp32 the same NaN means the optimisation "
        "diverged: a learning rate too high for the batch, no warmup, or inf/NaN in the data.",
        "In fp16: train in bf16 (Ampere or newer) or fp32 for the overflowing layers. In any "
        "precision: lower the learning rate, add warmup, clip gradients, and check the data "
        "for inf/NaN.",
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
        "cuda_forked_after_init",
        "CUDA used in a process forked after the parent started CUDA",
        "A CUDA context does not survive fork(): once the parent process has touched the GPU "
        "(a tensor moved to it, torch.cuda.* called at import time or in a Dataset's "
        "__init__), children created with the default 'fork' start method on Linux (DataLoader "
        "workers, multiprocessing pools, a serving engine's workers, a task queue's workers) "
        "cannot use CUDA.",
        "Start the children with 'spawn': torch.multiprocessing.set_start_method('spawn', "
        "force=True) under `if __name__ == '__main__':`, DataLoader(..., "
        "multiprocessing_context='spawn'), vLLM's VLLM_WORKER_MULTIPROC_METHOD=spawn; or keep "
        "the parent off the GPU until the children exist (move data to the GPU in the training "
        "loop, not in the Dataset).",
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
        "checkpoint_corrupt",
        "The checkpoint, weights or downloaded archive is truncated or not the file",
        "The file being loaded is not a whole checkpoint (or model package, or dataset "
        "archive): a download or a save that stopped "
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
        "loss_without_grad",
        "The loss is not connected to anything that trains",
        "backward() was called on a tensor that autograd did not record: every parameter it "
        "depends on is frozen (a PEFT model with nothing trainable, requires_grad switched off), "
        "the forward ran under torch.no_grad() or inference_mode (an evaluation loop, Lightning's "
        "test and predict), gradient checkpointing started from frozen inputs (embeddings of a "
        "LoRA model), or the loss was rebuilt from .item(), .detach() or NumPy.",
        "Check what trains: sum(p.requires_grad for p in model.parameters()); run the forward "
        "with gradients on; with gradient checkpointing on a frozen base call "
        "model.enable_input_require_grads() or use gradient_checkpointing_kwargs="
        "{'use_reentrant': False}; build the loss from tensors, not from .item() or NumPy.",
    ),
    Cause(
        "lora_targets_not_found",
        "The LoRA target modules are not in the model",
        "peft found none of the module names in target_modules in the base model: names of "
        "another architecture (LLaMA's q_proj and v_proj on ChatGLM, Baichuan or GPT-2), "
        "layers a quantisation replaced with its own class (GPTQ's QuantLinear), or "
        "'all-linear' on a peft too old to know it.",
        "List the model's linear layers and pick from them: print(sorted({n.split('.')[-1] for "
        "n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})) (ChatGLM and Falcon: "
        "query_key_value, Baichuan: W_pack, GPT-2: c_attn); or use target_modules='all-linear' "
        "with peft 0.8 or later; for a quantised model use the peft and quantisation releases "
        "that support it.",
    ),
    Cause(
        "nan_in_backward",
        "A backward function returned NaN",
        "Autograd's anomaly mode stopped at the first backward function whose result held NaN. "
        "Usually the op's derivative is undefined at the value it met (sqrt, a fractional pow, "
        "norm or cdist at zero distance, division by zero, log of zero, a singular solve), or "
        "NaN/inf was already in its input (the data, an fp16 overflow). The message names the "
        "op, not why.",
        "Find the op's forward call in the traceback anomaly mode printed above the error, and "
        "guard it: clamp or add an epsilon (x.clamp_min(1e-12).sqrt(), torch.where before "
        "dividing), or use a form with a defined gradient (matmul-based distances instead of "
        "cdist at zero); check the inputs with torch.isfinite; in fp16, try bf16.",
        generic=True,
    ),
    Cause(
        "collective_timeout_uneven_data",
        "Ranks took different paths: uneven data or rank-dependent code",
        "When ranks process different numbers of batches, or run code that depends on the rank "
        "(a metric logged on one rank only, a branch on the rank or on a value that differs "
        "between ranks), one rank waits in a collective the others never reach or reach in "
        "another order: it times out (often at the end of an epoch or in evaluation), or "
        "torch.distributed's debug check reports the mismatch.",
        "Give every rank the same number of batches: DistributedSampler with drop_last=True, "
        "equal shards, or the DDP join() context manager for uneven inputs; and make every rank "
        "call the same collectives in the same order (log the same metric keys on every rank).",
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
        "fp16_trainable_weights",
        "Trainable weights held in fp16 under the fp16 gradient scaler",
        "Automatic mixed precision keeps the weights it trains in fp32 and computes in fp16; "
        "its GradScaler refuses to unscale gradients of parameters that are themselves fp16 "
        '("Attempting to unscale FP16 gradients"). That happens when a model is loaded in '
        "fp16 (torch_dtype=torch.float16, .half()) and then trained with fp16 autocast, or when "
        "adapter (LoRA) weights are created in the base model's fp16.",
        "Keep the trained parameters in fp32: load the model in fp32 (or bf16 with bf16=True "
        "instead of fp16=True), or cast the trainable ones up (for p in model.parameters(): if "
        "p.requires_grad: p.data = p.data.float()); with PEFT, leave autocast_adapter_dtype on.",
    ),
    Cause(
        "ddp_reentrant_checkpointing",
        "DDP saw a parameter ready twice (reentrant activation checkpointing or a shared parameter)",
        "DistributedDataParallel expects each parameter's gradient once per backward. Reentrant "
        "activation checkpointing (torch.utils.checkpoint with use_reentrant=True, the old "
        "default, and transformers' gradient_checkpointing before use_reentrant=False) runs a "
        "second backward over the checkpointed blocks, and so does a parameter used outside "
        "forward or shared between concurrent forward-backward passes: the reducer raises "
        '"Expected to mark a variable ready only once".',
        "Use non-reentrant checkpointing (torch.utils.checkpoint(..., use_reentrant=False); "
        'transformers: gradient_checkpointing_kwargs={"use_reentrant": False}); or, if the graph '
        "is the same every step, DDP(static_graph=True); and find_unused_parameters=False unless "
        "it is needed.",
    ),
    Cause(
        "serving_config_invalid",
        "The serving engine refused its configuration",
        "Inference engines check their settings against the model and the GPU at start-up: "
        "the tensor-parallel size must divide the attention heads, max_model_len may not exceed "
        "the context the model's config.json declares, and the KV cache left in GPU memory "
        "after the weights must hold at least one sequence of max_model_len. A setting that "
        "fails is refused before serving starts.",
        "Choose settings the model and the GPU allow: a tensor_parallel_size that divides its "
        "attention heads (or pipeline_parallel_size for the rest), a max_model_len at most its "
        "max_position_embeddings and within what the KV cache holds (or a larger "
        "gpu_memory_utilization, quantised weights, more GPUs).",
    ),
    Cause(
        "hub_access_denied",
        "The model could not be fetched or found (Hugging Face Hub or a local path)",
        "from_pretrained and the engines built on it read a model from a local folder or the "
        "Hugging Face Hub. A gated or private repository answers 401/403 without a token that "
        'has access; a misspelt id or path is "not a valid model identifier"; without network '
        "and without a cached copy nothing can be read.",
        "Check the id or path the error names. For a gated model accept its licence on its Hub "
        "page, then log in (huggingface-cli login, or HF_TOKEN=... in the environment) with a "
        "token that can read it; offline, download it first (huggingface-cli download ID) and "
        "set HF_HUB_OFFLINE=1.",
    ),
    Cause(
        "nccl_network_error",
        "NCCL lost its connection to another rank (a remote process died or the network failed)",
        "NCCL reports a remote error when a peer's connection breaks mid-collective: the other "
        "rank exited (it crashed, ran out of memory or was killed: its own log says why), or "
        "the network between the nodes failed. InfiniBand/RoCE completion errors name the "
        "second: status 12 is the transport's retry count exceeded (the peer's port did not "
        "answer: a link down or flapping, congestion, a switch), status 5 the requests flushed "
        "after it.",
        "First read the other ranks' logs: the rank that failed first names the cause, and this "
        "error is its echo. If every rank was alive: check the links on both nodes (ibstat, "
        "ibv_devinfo; dmesg for mlx5 errors; the switch's port counters), give a lossy fabric "
        "a longer timeout (NCCL_IB_TIMEOUT=22), name the HCAs to use "
        "(NCCL_IB_HCA) and, with GPUDirect RDMA, check that ACS is off on the PCIe switches.",
    ),
    Cause(
        "backward_graph_freed",
        "Backward ran through a graph whose saved tensors were already freed",
        "backward() frees the graph's saved tensors; a second backward through any part of it "
        "fails. Usually a tensor from an earlier step is part of this step's graph (an RNN's "
        "hidden state, a running loss, a memory bank or EMA, a value computed once outside the "
        "loop), or the code calls backward twice on one forward.",
        "Detach what carries over between steps (h = h.detach(); total += loss.item()), compute "
        "inside the loop what the loss depends on, one backward per forward; retain_graph=True "
        "only where two backward passes over one graph are meant.",
    ),
    Cause(
        "inplace_modified_for_grad",
        "A tensor autograd saved was changed in place",
        "Autograd saved a tensor for the backward pass and the code then changed it in place "
        "(x += y, x[idx] = v, an nn.ReLU(inplace=True), an optimizer step between a forward and "
        "its backward, as in GAN loops): its version counter moved on, so the gradient would be "
        "wrong.",
        "Find the op with torch.autograd.set_detect_anomaly(True) and make it out of place "
        "(x = x + y, inplace=False, x = x.clone() before writing into it); in a GAN, step the "
        "optimizer after every backward that needs the old weights, or detach.",
    ),
    Cause(
        "quantized_model_moved",
        "A bitsandbytes-quantized model was moved with .to() or .cuda()",
        "A model loaded in 4 or 8 bit is placed on its devices when it is loaded; transformers "
        "and diffusers refuse .to()/.cuda() on it (older bitsandbytes and accelerate cannot move "
        "quantized weights at all).",
        "Load it where it runs (device_map={'': 0} or 'auto') and drop .to(device)/.cuda() on the "
        "model or pipeline; where the message asks for it, upgrade bitsandbytes (>= 0.43.2) or "
        "accelerate.",
    ),
    Cause(
        "view_noncontiguous",
        "view() on a tensor whose memory layout it cannot reinterpret",
        "Tensor.view only relabels the existing memory, so it needs a layout where the new shape "
        "fits the strides: after transpose, permute, expand or some slices the tensor is not "
        "contiguous. Code written for an older torch, where an op returned a contiguous result, "
        "fails this way on a newer one.",
        "Use .reshape(...) (it copies only when it must) or .contiguous().view(...) at the line "
        "the traceback shows.",
    ),
    Cause(
        "index_dtype_invalid",
        "An index tensor has the wrong dtype",
        "Embedding lookups, index_select, gather, scatter and indexing take integer (int64) "
        "indices; a float, half or int32 tensor (labels read as float, token ids cast with the "
        "model to fp16, a numpy int32 array) is refused.",
        "Cast the indices to long where they are made: ids.long(), labels.to(torch.int64), "
        "torch.as_tensor(array, dtype=torch.long); keep them out of model.half()/autocast casts.",
    ),
    Cause(
        "inference_tensor_in_autograd",
        "A tensor made under inference mode was used outside it",
        "Tensors created inside torch.inference_mode() (Lightning's predict and test, a "
        "generation or evaluation helper, a cached embedding) can never join an autograd graph "
        "or be changed in place outside it; a training step that saves one for backward fails.",
        "Create the tensors the training step uses outside inference mode (torch.no_grad() "
        "instead where gradients are not needed, Lightning: Trainer(inference_mode=False)), or "
        "clone them before use: x = x.clone().",
    ),
    Cause(
        "torch_compile_failed",
        "torch.compile could not compile the model",
        "torch.compile traces the model with TorchDynamo and compiles it with a backend "
        "(Inductor by default, which needs Triton on the GPU and a C++ compiler on the CPU): "
        "the code uses something Dynamo cannot trace, the backend or its compiler is missing, "
        "the Python is newer than the torch release supports for compile, or it is a bug of "
        "that release.",
        "Confirm by running without it (remove torch.compile or set TORCH_COMPILE_DISABLE=1); "
        "to keep going, let failures fall back to eager (torch._dynamo.config.suppress_errors "
        "= True) or leave the failing module uncompiled; upgrade torch, as compile bugs are "
        "often fixed in the next release.",
    ),
    Cause(
        "spawn_main_unguarded",
        "A process was started while the main module was being imported",
        "Under the spawn start method (the default on Windows and macOS) each new process "
        "re-imports the main script; a script that starts DataLoader workers or processes at its "
        "top level, outside `if __name__ == '__main__':`, starts them again from every child, "
        "which multiprocessing refuses.",
        "Put the script's top-level work under `if __name__ == '__main__':` (a main() called "
        "from there), calling multiprocessing.freeze_support() first in a frozen executable; "
        "num_workers=0 avoids worker processes altogether.",
    ),
)

"""Fixes for a run that failed while it ran: a label out of range, NCCL, a port in use, unused
DDP parameters, a checkpoint that is not whole or does not fit the model."""

from __future__ import annotations

import re

from dlrig.diagnose.advice.figures import DOUBT
from dlrig.machine.model import Machine


def nccl_timeout(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    out = {"op": groups["op"]} if groups.get("op") else {}
    if facts.get("nccl_failed_line") and not facts.get("timeout_evidence"):
        # ProcessGroupNCCL says "failed or timed out" for both: without the watchdog's timeout
        # line, a collective that failed (a transport error, a rank that died) reads the same
        out[DOUBT] = (
            "the log shows NCCL operations that failed or timed out, and no timeout: a failed "
            "collective (a network or transport error, a rank that died) reads the same"
        )
    timeout = groups.get("timeout_ms")
    if timeout and timeout.isdigit():
        out["timeout_ms"] = timeout
        minutes = int(timeout) / 60000
        out["timeout_advice"] = (
            f"The {groups.get('op') or 'collective'} waited the full {minutes:g} min timeout: "
            "a rank stopped calling "
            "collectives long before, so the network is rarely the cause."
        )
    return out


def port_in_use(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    port = groups.get("port")
    if port and port.isdigit():
        suggestion = int(port) + 1 if 1024 <= int(port) < 65535 else 29501
        advice = f"Use a free port: torchrun --master_port={suggestion} ... (or export MASTER_PORT={suggestion})"
        if int(port) < 1024:
            advice += f"; port {port} is a system port (22 is ssh): pick one above 1024"
        return {"port": port, "port_advice": advice}
    return {
        "port": "29500",
        "port_advice": "Use a free port: torchrun --master_port=29501 ... (or export MASTER_PORT=29501)",
    }


def ddp_unused(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    parameters = groups.get("parameters")
    indices = groups.get("indices")
    named = (
        f" The log names them: {parameters}."
        if parameters
        else f" The log names them by index: {indices.strip()}."
        if indices
        else ""
    )
    return {
        "ddp_unused_advice": (
            "Make every parameter contribute to the loss, set requires_grad=False on the ones "
            "you do not train before wrapping the model, or pass find_unused_parameters=True "
            "to DistributedDataParallel (Lightning: strategy='ddp_find_unused_parameters_true'; "
            f"HF Trainer: ddp_find_unused_parameters=True).{named}"
        )
    }


def nccl_system(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    warn = groups.get("nccl_warn")
    return {"nccl_warn_said": f" (NCCL WARN: {warn.strip()})" if warn else ""}


def checkpoint(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    key = groups.get("load_key")
    operand = groups.get("operand")  # the weights-only unpickler names the byte as a number
    if not key and operand and operand.isdigit() and 32 <= int(operand) < 127:
        key = chr(int(operand))
    if key == "v":
        said = " (it starts with 'v': a Git LFS pointer, 'version https://git-lfs...')"
        advice = (
            "The file is a Git LFS pointer, not the weights: git lfs install && git lfs pull "
            "(in the model's repository), or download the file itself (huggingface-cli download "
            "REPO FILE --force-download)."
        )
    elif key == "<":
        said = " (it starts with '<': an HTML page was saved in its place)"
        advice = (
            "The download saved a web page (a login, an error or a redirect page): download the "
            "file again from a direct link, with the token the site asks for."
        )
    else:
        said = f" (its first byte reads {key!r})" if key else ""
        advice = (
            "Download or save the checkpoint again and check its size against the source; a "
            "save that stopped part-way (a full disk, a killed job) leaves a truncated file, so "
            "save to a temporary name and rename when done."
        )
    return {"load_key_said": said, "checkpoint_advice": advice}


# top-level keys of a training checkpoint file (PyTorch Lightning, mmcv/mmengine, timm, the
# PyTorch tutorials' {'epoch', 'model_state_dict', 'optimizer_state_dict'}, custom trainers)
_CHECKPOINT_WRAPPER_KEYS = frozenset(
    {
        "state_dict",
        "model",
        "model_state_dict",
        "model_state",
        "net",
        "network",
        "params",
        "optimizer",
        "optimizer_state_dict",
        "epoch",
        "global_step",
        "config",
        "config_dict",
        "args",
        "meta",
        "hyper_parameters",
    }
)


def state_dict(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    model = groups.get("model")
    unexpected = groups.get("unexpected", "")
    missing = groups.get("missing", "")
    param = groups.get("param")
    out = {"model_said": f"the model {model}" if model else "the model"}
    if param:
        out["mismatch_said"] = (
            f": {param} is {groups.get('checkpoint_shape')} in the checkpoint and "
            f"{groups.get('model_shape')} in the model"
        )
        split = _model_parallel_split(
            param, groups.get("checkpoint_shape", ""), groups.get("model_shape", "")
        )
        if split:
            # one dimension exactly 1/N of the model's, N a power of two: a shard of a tensor- or
            # model-parallel checkpoint, not another architecture
            out["state_dict_advice"] = (
                f"The checkpoint holds 1/{split} of {param} along one dimension: a shard of a "
                f"{split}-way tensor- or model-parallel run, unless the model is another variant. "
                "Load it with the same model-parallel size, or merge the shards into one "
                "checkpoint first (the framework's conversion script); strict=False would only "
                "hide the mismatch."
            )
        else:
            out["state_dict_advice"] = (
                f"Build the model with the checkpoint's configuration ({param} differs: another "
                "variant, another number of classes or tokens); to load the rest into a new head "
                "on purpose, drop that key and load with strict=False."
            )
    elif unexpected in _CHECKPOINT_WRAPPER_KEYS:
        # the whole training checkpoint (a dict holding the weights beside the optimizer, the
        # epoch or the config) given to load_state_dict instead of its weights
        out["mismatch_said"] = (
            f": its top-level key {unexpected!r} is a training checkpoint's, not a layer's (the "
            "whole checkpoint was passed, not the weights inside it)"
        )
        out["state_dict_advice"] = (
            "Pass the weights inside it: ckpt = torch.load(PATH, map_location='cpu'); "
            "print(ckpt.keys()); model.load_state_dict(ckpt['state_dict']) (or ckpt['model'], "
            "whichever holds the layer names)."
        )
    elif unexpected.endswith("num_batches_tracked") and not missing:
        # BatchNorm's counter, saved by torch >= 0.4.1: read by an older torch (or a model whose
        # BatchNorm does not track running statistics), whatever the keys' prefix
        out["mismatch_said"] = (
            f": the checkpoint's BatchNorm layers carry num_batches_tracked ({unexpected}) and "
            "the model's do not (saved by a newer torch than the one loading it)"
        )
        out["state_dict_advice"] = (
            "Load it with the torch release it was saved with (0.4.1 or later), or drop the "
            "counters: state = {k: v for k, v in state.items() if not "
            "k.endswith('num_batches_tracked')}."
        )
    elif (unexpected.startswith("module.") and not missing.startswith("module.")) or (
        missing and unexpected and _one_wrapper_apart(unexpected, missing)
    ):
        # saved through DataParallel/DDP: "module." in front, or one segment down
        pair = f": {unexpected} against {missing}" if missing else ""
        out["mismatch_said"] = (
            ": the checkpoint's keys have 'module.' where the model's do not (saved from a model "
            f"wrapped in DataParallel/DDP{pair})"
        )
        out["state_dict_advice"] = (
            "Drop that 'module.' from the keys: state = {re.sub(r'(^|[.])module[.]', r'\\1', k, "
            "count=1): v for k, v in state.items()} (or save the unwrapped model's state_dict "
            "next time)."
        )
    elif missing and unexpected and _one_wrapper_apart(missing, unexpected):
        out["mismatch_said"] = (
            f": the model's keys have 'module.' where the checkpoint's do not ({missing} against "
            f"{unexpected}: the model is wrapped in DataParallel/DDP and the checkpoint was not)"
        )
        out["state_dict_advice"] = (
            "Load the weights before wrapping the model (or into the wrapped model's .module), "
            "or load them on one process where the model is not wrapped."
        )
    else:
        keys = ", ".join(
            k
            for k in (missing and f"missing {missing}", unexpected and f"unexpected {unexpected}")
            if k
        )
        out["mismatch_said"] = f" ({keys})" if keys else ""
        out["state_dict_advice"] = (
            "Load the checkpoint into the model it was saved from (same architecture and "
            "configuration); strict=False only where parts are new on purpose."
        )
    return out


_WRAPPER = re.compile(r"(^|[.])module[.]")


def _one_wrapper_apart(wrapped: str, plain: str) -> bool:
    """`wrapped` is `plain` with one "module." (DataParallel/DDP's attribute, a whole name
    segment: not "submodule.") inserted."""
    return _WRAPPER.sub(r"\1", wrapped, count=1) == plain != wrapped


def _capability(text: str | None) -> str | None:
    """ "8.9", "89" (vLLM) or "(8, 9)" (xformers) as "8.9"; "9.0 or 8.9" as it is."""
    if not text:
        return None
    if " or " in text:
        return text
    digits = [d for d in text.replace("(", " ").replace(")", " ").replace(",", " ").split() if d]
    if len(digits) == 2:
        return f"{digits[0]}.{digits[1]}"
    if digits and digits[0].isdigit() and len(digits[0]) >= 2:
        return f"{digits[0][:-1]}.{digits[0][-1]}"
    return digits[0] if digits else None


# what each refused feature needs when the message does not say, and its name for a user
_FEATURE_FLOOR = {"fp8e4nv": "8.9", "bfloat16": "8.0", "triton": "7.0"}
_FEATURE_NAME = {
    "fp8e4nv": "Triton's FP8 (fp8e4nv)",
    "triton": "torch.compile's Triton backend",
    "bfloat16": "bfloat16",
}


def gpu_too_old(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    feature = groups.get("feature")
    needed = _capability(groups.get("needed")) or _FEATURE_FLOOR.get(feature or "")
    have = _capability(groups.get("have"))
    gpu = (groups.get("gpu") or "").strip()
    if gpu[:2] in ("b'", 'b"'):  # vLLM printed the name as bytes: b'Tesla T4'
        gpu = gpu[2:-1]
    gpu = gpu or "this GPU"
    said = f"compute capability {needed}" if needed else "a newer GPU generation"
    if have:
        said += f"; {gpu} has {have}"
    return {
        "capability_said": said,
        "feature_said": _FEATURE_NAME.get(feature or "", feature or "a feature"),
    }


def serving_config(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """The tensor-parallel sizes a model's attention heads allow, up to a node of 8 GPUs."""
    heads = groups.get("heads")
    if not heads or not heads.isdigit() or int(heads) == 0:
        return {}
    sizes = [n for n in range(1, 9) if int(heads) % n == 0]
    return {"tp_choices": ", ".join(str(n) for n in sizes)}


# Heads, embeddings and output layers change size with the task (num_labels, an added token):
# a power-of-two ratio there is another configuration, not a shard.
_RESIZED_ON_PURPOSE = re.compile(
    r"classifier|head|\bfc\b|score|\bcls\b|embed|wte|\bwpe\b|lm_head|output_layer|logits"
)


def _model_parallel_split(param: str, checkpoint_shape: str, model_shape: str) -> int | None:
    """N when a 2-D weight of the checkpoint is the model's with one dimension (of at least 256)
    divided by N, a power of two from 2 to 64, as a tensor-parallel shard is; else None."""
    if _RESIZED_ON_PURPOSE.search(param.lower()):
        return None
    saved = [int(n) for n in re.findall(r"\d+", checkpoint_shape)]
    wanted = [int(n) for n in re.findall(r"\d+", model_shape)]
    if len(saved) != 2 or len(wanted) != 2:
        return None
    differ = [(a, b) for a, b in zip(saved, wanted, strict=True) if a != b]
    if len(differ) != 1:
        return None
    part, whole = differ[0]
    if part == 0 or whole < 256 or whole % part:
        return None
    ratio = whole // part
    return ratio if ratio in (2, 4, 8, 16, 32, 64) else None


def ddp_twice(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """DDP saw a gradient twice: reentrant checkpointing first where the log shows checkpointing,
    a parameter used twice in one backward first where it does not."""
    reentrant = (
        "Use non-reentrant activation checkpointing (torch >= 1.11): "
        "torch.utils.checkpoint.checkpoint(fn, *args, use_reentrant=False); with transformers, "
        'model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": '
        'False}) or TrainingArguments(gradient_checkpointing_kwargs={"use_reentrant": False}); '
        "mmcv/mmdet models: with_cp=False."
    )
    static = (
        "If the model's graph is the same every step: DDP(model, static_graph=True) (torch >= "
        "1.11; Trainer: ddp_find_unused_parameters=False), and drop find_unused_parameters=True "
        "unless a parameter really goes unused."
    )
    if facts.get("checkpointing_evidence"):
        return {"ddp_twice_first": reentrant, "ddp_twice_second": static}
    twice = (
        "The log shows no activation checkpointing: a parameter took part twice in one backward "
        "(a module called twice in forward, weights shared between branches, two forward passes "
        "before one backward, or a parameter used in some steps and not in others). " + static
    )
    return {"ddp_twice_first": twice, "ddp_twice_second": reentrant}


def inplace(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    grad_fn = groups.get("grad_fn")
    where = f" (here the output of {grad_fn})" if grad_fn else ""
    return {
        "inplace_find_advice": "Find the op: torch.autograd.set_detect_anomaly(True) makes the "
        f"error name the forward line that created the tensor{where}."
    }


def shared_tensors(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    # without the names, the explanation is the cause's own (a template's empty value is missing)
    shared = groups.get("shared")
    return {"shared_note": f": {shared}"} if shared else {}


def lightning_hparams(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    """The missing __init__ arguments as keyword arguments for load_from_checkpoint; without a
    load_from_checkpoint frame the TypeError may be any constructor's."""
    names = re.findall(r"'(\w+)'", groups.get("args", ""))
    out = {"args_call": ", ".join(f"{name}=..." for name in names) or "the missing arguments"}
    if not facts.get("lightning_load_evidence"):
        out[DOUBT] = (
            "the log shows no load_from_checkpoint, so this may be any class built without the "
            "arguments its __init__ requires"
        )
    return out


def tensorrt_op(
    groups: dict[str, str], facts: dict[str, str], machine: Machine | None
) -> dict[str, str]:
    return {"op": groups.get("op") or "the operator"}


def shm(groups: dict[str, str], facts: dict[str, str], machine: Machine | None) -> dict[str, str]:
    """A tiny shared-memory map refused with ENOMEM is a limit on mappings, not /dev/shm's size."""
    size = groups.get("mmap_bytes", "")
    if not (groups.get("enomem") and size.isdigit() and int(size) < 1 << 20):
        return {}
    return {
        "shm_map_advice": (
            f"A map of {int(size):,} bytes was refused with 'Cannot allocate memory': that is the "
            "number of memory maps (vm.max_map_count, 65530 by default; each shared tensor "
            "takes one) or the process's memory limit, not /dev/shm's size. Check sysctl "
            "vm.max_map_count and raise it (sudo sysctl -w vm.max_map_count=1048576), send fewer, "
            "larger tensors between processes, and check ulimit -v and the container's memory."
        ),
        DOUBT: f"a map of {int(size):,} bytes refused for lack of memory is rarely /dev/shm's size",
    }

"""Fixes for the GPU libraries' own failures, by the status they report: cuDNN's BAD_PARAM is
the call's arguments, its INTERNAL_ERROR is most often memory."""

from __future__ import annotations

from dlrig.machine.model import Machine


def cudnn(groups: dict[str, str], facts: dict[str, str], machine: Machine | None) -> dict[str, str]:
    status = groups.get("status", "")
    if status.startswith("BAD_PARAM"):
        first = (
            "cuDNN rejected the call's arguments (BAD_PARAM): look at the input of the failing "
            "line first: an empty batch (x.shape[0] == 0: a slice, a split or a filter that left "
            "no samples), or a shape, dtype or layout the operation does not take (print its "
            "shape and dtype there). An old framework beside a newer system cuDNN fails the same "
            "way (next fix)."
        )
    elif status.startswith("NOT_SUPPORTED"):
        first = (
            "cuDNN has no kernel for this configuration (NOT_SUPPORTED): make the input "
            "contiguous (x.contiguous()), try float32 instead of half precision, and, to confirm, "
            "torch.backends.cudnn.enabled = False."
        )
    elif groups.get("engine"):
        first = (
            "No cuDNN engine takes this operation: most often a cuDNN other than the one the "
            "framework was built with (a system or second cuDNN first on the loader path; check "
            "torch.backends.cudnn.version()), or an input shape or dtype it has no kernel for; a "
            "smaller batch helps when the workspace is what is missing."
        )
    else:
        first = (
            "Retry with a smaller batch: CUDNN_STATUS_INTERNAL_ERROR / NOT_INITIALIZED and "
            "'unable to find a valid cuDNN algorithm' are often memory; for TensorFlow allow "
            "memory growth (tf.config.experimental.set_memory_growth)."
        )
    why = (
        " It refused the call's arguments: the input, or a cuDNN that does not match the framework."
        if status.startswith(("BAD_PARAM", "NOT_SUPPORTED"))
        else " It is often an out-of-memory in disguise, or a cuDNN that does not match the framework."
    )
    out = {"cudnn_first": first, "cudnn_why": why}
    if status:
        out["status"] = status
    return out

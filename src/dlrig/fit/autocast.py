"""CUDA's autocast, applied while tracing on the CPU.

The trace runs on CPU fake tensors, where `torch.autocast("cpu")` casts a different op set
than the GPU run would: CUDA runs layer_norm, softmax, sum, nll_loss, exp/log/pow and the
upsampling ops in fp32 and einsum/mv in 16 bits; the CPU does none of that and promotes
cat/stack instead. Saved activations then have the wrong dtypes. `cuda_cast_lists()` swaps the
CPU autocast kernels for ones that follow CUDA's lists (knowledge/data/fit_autocast.toml, from
torch's autocast_mode.h) for as long as the trace runs, forward and backward (checkpointed
layers re-run their forward under autocast during backward), and restores them after.
"""

from __future__ import annotations

import contextlib
import functools
import tomllib
import warnings
import weakref
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

POLICIES = ("lower_precision_fp", "fp32", "fp32_set_opt_dtype", "promote")


@functools.cache
def cuda_lists() -> dict[str, str]:
    """aten op name (with overload) -> CUDA cast policy."""
    text = resources.files("dlrig.knowledge").joinpath("data", "fit_autocast.toml").read_text()
    table = tomllib.loads(text)
    out = {name: policy for policy in POLICIES for name in table[policy]}
    out.update({name: "fp32_append_dtype" for name in table["fp32_append_dtype"]})
    return out


@functools.cache
def append_targets() -> dict[str, str]:
    text = resources.files("dlrig.knowledge").joinpath("data", "fit_autocast.toml").read_text()
    return dict(tomllib.loads(text)["fp32_append_dtype"])


def _overload(name: str) -> Any:
    import torch

    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base)
    return getattr(packet, overload or "default")


def _eligible(value: Any) -> bool:
    import torch

    return (
        isinstance(value, torch.Tensor)
        and value.is_floating_point()
        and value.dtype is not torch.float64
    )


def _map_tensors(value: Any, cast: Callable[[Any], Any]) -> Any:
    if isinstance(value, list | tuple):
        return type(value)(_map_tensors(v, cast) for v in value)
    return cast(value) if _eligible(value) else value


# Autocast casts a trainable leaf (a weight) once per autocast region and reuses the copy
# (at::autocast::cached_cast). Here a copy is reused while it is alive: a weight used twice in
# a forward (torchtune's chunked output projection) is cast once, and a checkpointed layer,
# whose copy was dropped, casts again when it recomputes (as CUDA does in its new region).
_CASTS: dict[tuple[int, Any], tuple[weakref.ref[Any], weakref.ref[Any]]] = {}


def _cached_cast(t: Any, dtype: Any) -> Any:
    if not (t.is_leaf and t.requires_grad):
        return t.to(dtype)
    source, copy = _CASTS.get((id(t), dtype), (None, None))
    made = copy() if copy is not None and source is not None and source() is t else None
    if made is None:
        made = t.to(dtype)
        _CASTS[(id(t), dtype)] = (weakref.ref(t), weakref.ref(made))
    return made


def _cast_all(args: tuple[Any, ...], kwargs: dict[str, Any], dtype: Any) -> tuple[Any, Any]:
    def cast(t: Any) -> Any:
        return t if t.dtype == dtype else _cached_cast(t, dtype)

    return (
        tuple(_map_tensors(a, cast) for a in args),
        {k: _map_tensors(v, cast) for k, v in kwargs.items()},
    )


def _tensors(value: Any) -> Iterator[Any]:
    if isinstance(value, list | tuple):
        for v in value:
            yield from _tensors(v)
    elif _eligible(value):
        yield value


def _first_eligible(args: tuple[Any, ...]) -> bool:
    return bool(args) and _eligible(args[0])


def _kernel(name: str, policy: str) -> Callable[..., Any]:
    import torch

    op = _overload(name)
    target = _overload(append_targets()[name]) if policy == "fp32_append_dtype" else op
    exclude = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
    arguments = [a.name for a in op._schema.arguments]
    dtype_at = arguments.index("dtype") if "dtype" in arguments else None

    def with_fp32(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """dtype=float32 unless the call names a dtype (positionally or by keyword)."""
        if dtype_at is not None and len(args) > dtype_at:
            if args[dtype_at] is None:
                args = (*args[:dtype_at], torch.float32, *args[dtype_at + 1 :])
            return args, kwargs
        if kwargs.get("dtype") is None:
            kwargs = {**kwargs, "dtype": torch.float32}
        return args, kwargs

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            if policy == "lower_precision_fp":
                args, kwargs = _cast_all(args, kwargs, torch.get_autocast_dtype("cpu"))
            elif policy == "fp32":
                args, kwargs = _cast_all(args, kwargs, torch.float32)
            elif policy == "promote":
                found = [t.dtype for a in (*args, *kwargs.values()) for t in _tensors(a)]
                if found:
                    widest = functools.reduce(torch.promote_types, found)
                    args, kwargs = _cast_all(args, kwargs, widest)
            elif policy == "fp32_set_opt_dtype" and _first_eligible(args):
                args, kwargs = with_fp32(args, kwargs)
            elif policy == "fp32_append_dtype" and _first_eligible(args):
                return target(*args, **kwargs, dtype=torch.float32)
            return op(*args, **kwargs)

    return kernel


def _passthrough(name: str) -> Callable[..., Any]:
    """A CPU-only autocast kernel replaced by no cast at all (CUDA leaves the op alone)."""
    import torch

    op = _overload(name)
    exclude = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        with torch._C._ExcludeDispatchKeyGuard(exclude):
            return op(*args, **kwargs)

    return kernel


def cpu_autocast_ops() -> list[str]:
    """aten ops that have a CPU autocast kernel in this torch build."""
    import torch

    return [
        name.removeprefix("aten::")
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("aten::")
        and torch._C._dispatch_has_kernel_for_dispatch_key(name, "AutocastCPU")
    ]


@contextlib.contextmanager
def cuda_cast_lists() -> Iterator[None]:
    """CPU autocast follows CUDA's per-op lists inside this block (restored on exit)."""
    import torch

    lists = cuda_lists()
    library = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
            for name in cpu_autocast_ops():
                if name not in lists:
                    library.impl(name, _passthrough(name), "AutocastCPU")
            for name, policy in lists.items():
                try:
                    _overload(name)
                except (AttributeError, RuntimeError):
                    continue  # an op this torch build does not have
                library.impl(name, _kernel(name, policy), "AutocastCPU")
        yield
    finally:
        library._destroy()
        _CASTS.clear()

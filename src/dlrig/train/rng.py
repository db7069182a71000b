"""Every random number generator a training step can draw from, saved and put back.

Python's `random`, NumPy's global generator, torch's CPU generator and each CUDA device's, plus
any `torch.Generator` the user handed the DataLoader or the sampler. States are stored as plain
lists and tensors so that `torch.load(weights_only=True)` reads them back.
"""

from __future__ import annotations

import random
from typing import Any

import torch


def capture(generators: dict[str, torch.Generator] | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": _plain(random.getstate()),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "generators": {name: g.get_state() for name, g in (generators or {}).items()},
    }
    numpy = _numpy()
    if numpy is not None:
        kind, keys, pos, has_gauss, cached = numpy.random.get_state()
        state["numpy"] = [kind, torch.from_numpy(keys.copy()), pos, has_gauss, cached]
    return state


def restore(state: dict[str, Any], generators: dict[str, torch.Generator] | None = None) -> None:
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    cuda_states = state.get("cuda") or []
    if cuda_states and torch.cuda.is_available():
        for index, cuda_state in enumerate(cuda_states[: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state, index)
    numpy = _numpy()
    if numpy is not None and state.get("numpy"):
        kind, keys, pos, has_gauss, cached = state["numpy"]
        numpy.random.set_state((kind, keys.numpy(), pos, has_gauss, cached))
    saved = state.get("generators") or {}
    for name, generator in (generators or {}).items():
        if name in saved:
            generator.set_state(saved[name])


def torch_only(generators: dict[str, torch.Generator] | None = None) -> dict[str, Any]:
    """The generators the DataLoader draws from when an epoch starts (its workers' base seed)."""
    return {
        "torch": torch.get_rng_state(),
        "generators": {name: g.get_state() for name, g in (generators or {}).items()},
    }


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _numpy() -> Any:
    import sys

    # Only when the user's program already imported NumPy: importing it here would be a cost
    # (and a dependency) the run did not ask for.
    return sys.modules.get("numpy")

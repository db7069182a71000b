"""dlrig: take a deep-learning server from purchase to production and keep it healthy.

Importing this package is cheap on purpose: it must not import torch, NVML or rich,
so `dlrig doctor` still works on a machine whose frameworks are broken.
"""

__version__ = "0.1.0"

import importlib
from types import ModuleType

# The commands, each a package with its own `run(options, ...)` and `__all__`; imported on
# first use (`dlrig.doctor`), never by `import dlrig`. `from dlrig import *` imports them all,
# `train` (and so torch) included: import the commands you use instead.
__all__ = [
    "accept",
    "bench",
    "diagnose",
    "doctor",
    "fit",
    "health",
    "monitor",
    "pack",
    "plan",
    "profile",
    "provision",
    "train",
]


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])


def __getattr__(name: str) -> ModuleType:
    if name in __all__:
        return importlib.import_module(f"dlrig.{name}")
    raise AttributeError(f"module 'dlrig' has no attribute {name!r}")

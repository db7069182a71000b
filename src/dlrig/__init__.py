"""dlrig: take a deep-learning server from purchase to production and keep it healthy.

Importing this package is cheap on purpose: it must not import torch, NVML or rich,
so `dlrig doctor` still works on a machine whose frameworks are broken.
"""

__version__ = "0.1.0"

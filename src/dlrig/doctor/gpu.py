"""GPU checks, one module a concern. Importing this module registers them all, in the order
doctor reports them (a tuple, not an import block, so sorting imports cannot reorder them):

- gpu_arch: architecture vs the installed PyTorch build
- gpu_pcie: PCIe link width and generation
- gpu_memory: ECC errors, retired pages, remapped rows
- gpu_power: clock slowdowns, temperature, power limits
- gpu_setup: MIG mode, ECC mode, memory held while idle
- gpu_xid: Xid errors in the kernel log
- gpu_fleet: one model for all GPUs, NVLink up between them
"""

from __future__ import annotations

import importlib

CONCERNS = ("gpu_arch", "gpu_pcie", "gpu_memory", "gpu_power", "gpu_setup", "gpu_xid", "gpu_fleet")

for _concern in CONCERNS:
    importlib.import_module(f"dlrig.doctor.{_concern}")

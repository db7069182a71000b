"""Every doctor check, in the order doctor reports them: an explicit list of the area modules,
each contributing the checks it defines, in the order it defines them.

The areas import only `registry` (the Check type and the decorator); nothing imports the areas
but this module, so no import cycle holds the list together and sorting imports cannot reorder
it.
"""

from __future__ import annotations

from types import ModuleType

from dlrig.doctor import (
    containers,
    cuda,
    driver,
    frameworks,
    gaudi,
    gpu_arch,
    gpu_fleet,
    gpu_memory,
    gpu_pcie,
    gpu_power,
    gpu_setup,
    gpu_xid,
    host,
    nccl,
    network,
    rocm,
    storage,
    tfjax,
)
from dlrig.doctor.registry import Check

# The report's order: software before the GPUs, the GPUs from the build's fit to their errors,
# then the host, the fabric and the storage.
AREAS: tuple[ModuleType, ...] = (
    containers,
    cuda,
    driver,
    frameworks,
    tfjax,
    gpu_arch,
    rocm,
    gaudi,
    gpu_pcie,
    gpu_memory,
    gpu_power,
    gpu_setup,
    gpu_xid,
    gpu_fleet,
    host,
    nccl,
    network,
    storage,
)


def _defined_in(area: ModuleType) -> tuple[Check, ...]:
    """The checks `area` defines (not ones it imports), in definition order."""
    return tuple(
        value
        for value in vars(area).values()
        if isinstance(value, Check) and value.function_module == area.__name__
    )


CHECKS: tuple[Check, ...] = tuple(check for area in AREAS for check in _defined_in(area))
_BY_ID = {check.id: check for check in CHECKS}


def all_checks() -> tuple[Check, ...]:
    """Every check, in report order (`dlrig doctor --list`)."""
    return CHECKS


def get(check_id: str) -> Check | None:
    """The check with this id ("gpu.pcie_width"), or None (`dlrig doctor --explain ID`)."""
    return _BY_ID.get(check_id)

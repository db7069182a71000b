"""How each recorded field's text becomes a model value, whatever format recorded it.

The XML, CSV and plain-text readers find a field in different places (an element path, a CSV
column, a label path) but read its text the same way: a size is a size in all three. Each reader
names where its fields stand; these tables say how each is read, once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from dlrig.machine.model import PcieLink
from dlrig.machine.readers import values

Key = TypeVar("Key")
Read = Callable[[str | None], object]

# Gpu fields that are one recorded value each (the rest are built from several).
GPU: dict[str, Read] = {
    "uuid": values.text,
    "pci_bus_id": values.text,
    "serial": values.text,
    "vbios_version": values.text,
    "memory_total_bytes": values.size_bytes,
    "memory_used_bytes": values.size_bytes,
    "compute_capability": values.text,
    "persistence_mode": values.flag,
    "performance_state": values.text,
    "power_draw_watts": values.number,
    "power_limit_watts": values.number,
    "power_default_limit_watts": values.number,
    "temperature_c": values.number,
    "temperature_slowdown_c": values.number,
    "ecc_mode_enabled": values.flag,
    "ecc_mode_pending": values.flag,
    "mig_mode_enabled": values.flag,
    "utilization_gpu_percent": values.number,
    "utilization_memory_percent": values.number,
    "utilization_encoder_percent": values.number,
    "utilization_decoder_percent": values.number,
    "sm_clock_mhz": values.integer,
    "sm_clock_max_mhz": values.integer,
    "memory_clock_mhz": values.integer,
    "memory_clock_max_mhz": values.integer,
    "fan_speed_percent": values.number,
    "memory_temperature_c": values.number,
    "pcie_tx_bytes_per_second": values.byte_rate,
    "pcie_rx_bytes_per_second": values.byte_rate,
    "pcie_replay_errors": values.integer,
}

# PcieLink fields read as recorded (`pcie_link` works out gen_max).
PCIE: dict[str, Read] = {
    "gen_current": values.integer,
    "width_current": values.link_width,
    "width_max": values.link_width,
}

ECC: dict[str, Read] = dict.fromkeys(
    ("volatile_corrected", "volatile_uncorrected", "aggregate_corrected", "aggregate_uncorrected"),
    values.integer,
)

RETIRED: dict[str, Read] = {
    "single_bit": values.integer,
    "double_bit": values.integer,
    "pending": values.flag,
}

REMAPPED: dict[str, Read] = {
    "correctable": values.integer,
    "uncorrectable": values.integer,
    "pending": values.flag,
    "failure": values.flag,
}


MIG_DEVICE: dict[str, Read] = {
    "gpu_instance_id": values.integer,
    "memory_total_bytes": values.size_bytes,
    "memory_used_bytes": values.size_bytes,
    "sm_count": values.integer,
}

PROCESS: dict[str, Read] = {
    "name": values.text,
    "kind": values.text,
    "used_memory_bytes": values.size_bytes,
    "gpu_instance_id": values.integer,
    "compute_instance_id": values.integer,
}


def read(
    readers: Mapping[str, Read], where: Mapping[str, Key], lookup: Callable[[Key], str | None]
) -> dict[str, Any]:
    """The fields `where` places, each read from the text `lookup` finds at its place; pass
    them to the model's constructor as keywords."""
    return {name: readers[name](lookup(place)) for name, place in where.items()}


def pcie_link(
    where: Mapping[str, Key], gen_maxima: tuple[Key, ...], lookup: Callable[[Key], str | None]
) -> PcieLink:
    """The link, its gen_max the smallest of the maximum generations recorded (the link's, the
    host's, the device's): new drivers fold the host into the link's; on older ones this keeps
    a Gen4 card in a Gen3 slot from looking "downgraded"."""
    gens = [g for g in (values.integer(lookup(place)) for place in gen_maxima) if g is not None]
    return PcieLink(gen_max=min(gens) if gens else None, **read(PCIE, where, lookup))


def first_found(get: Callable[[Key], str | None]) -> Callable[[tuple[Key, ...]], str | None]:
    """A lookup of several places (a field renamed between driver releases) that gives the
    first text that is not empty, as `get(a) or get(b)` would."""

    def lookup(places: tuple[Key, ...]) -> str | None:
        found = None
        for place in places:
            found = found or get(place)
        return found

    return lookup

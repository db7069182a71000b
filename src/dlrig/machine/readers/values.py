"""Parsing of the scalar values nvidia-smi prints ("81920 MiB", "67.03 W", "[N/A]", "16x").

nvidia-smi spells "no value" many ways across versions and output formats: "N/A", "[N/A]",
"[Not Supported]", "Requested functionality has been deprecated", "Unknown Error". All of them
mean "not available", which is data (None), never an error.
"""

from __future__ import annotations

import re

_UNITS = {
    "b": 1,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
}

_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([A-Za-z%/]*)\s*$")


def text(raw: str | None) -> str | None:
    """The value with N/A spellings mapped to None."""
    if raw is None:
        return None
    value = raw.strip()
    if not value:
        return None
    bare = value.strip("[]").strip().lower()
    if bare in {"n/a", "not supported", "unknown error", "insufficient permissions", "-"}:
        return None
    if bare.startswith("requested functionality has been deprecated"):
        return None
    if bare.startswith("not supported") or bare.startswith("gpu requires reset"):
        return None
    return value


def json_text(raw: object) -> str | None:
    """A JSON reading as text: `text` of a string, None for anything else (numbers, null)."""
    return text(raw) if isinstance(raw, str) else None


def pci_address(bus_id: str | None) -> str | None:
    """One spelling of a PCI address: NVML writes an 8-digit domain ("00000000:83:00.0"),
    sysfs, rocm-smi and torch 4 ("0000:83:00.0"), lspci none ("83:00.0"); all give "0:83:0.0"."""
    if not bus_id:
        return None
    parts = bus_id.strip().lower().replace(".", ":").split(":")
    if len(parts) == 3:  # "83:00.0": no domain written, the first
        parts.insert(0, "0")
    if len(parts) != 4:
        return None
    try:
        domain, bus, device, function = (int(part, 16) for part in parts)
    except ValueError:
        return None
    return f"{domain:x}:{bus:02x}:{device:x}.{function:x}"


def _number_match(raw: str | None) -> re.Match[str] | None:
    """The number and its unit in a value ("67.03 W": "67.03", "W"); None for N/A or text."""
    value = text(raw)
    return None if value is None else _NUMBER.match(value)


def number(raw: str | None) -> float | None:
    """A plain number with an optional unit suffix ("67.03 W", "27 C", "99 %")."""
    match = _number_match(raw)
    return None if match is None else float(match.group(1))


def integer(raw: str | None) -> int | None:
    value = text(raw)
    if value is None:
        return None
    if value.lower().startswith("0x"):
        try:
            return int(value, 16)
        except ValueError:
            return None
    parsed = number(value)
    return None if parsed is None else int(parsed)


def _scaled(raw: str | None, units: dict[str, int], default_unit: str) -> float | None:
    """A number times its unit's scale ("81920 MiB", "4000 KB/s"); None for unknown units."""
    match = _number_match(raw)
    if match is None:
        return None
    unit = (match.group(2) or default_unit).lower()
    if unit not in units:
        return None
    return float(match.group(1)) * units[unit]


def size_bytes(raw: str | None, default_unit: str = "mib") -> int | None:
    """A memory size: "81920 MiB" -> bytes. Bare numbers use `default_unit`."""
    scaled = _scaled(raw, _UNITS, default_unit)
    return None if scaled is None else int(scaled)


_RATE_UNITS = {"b/s": 1, "kb/s": 1000, "mb/s": 1000**2, "gb/s": 1000**3}


def byte_rate(raw: str | None) -> float | None:
    """ "4000 KB/s" -> 4000000.0 bytes per second. nvidia-smi's KB here is 1000 bytes: it
    prints NVML's nvmlDeviceGetPcieThroughput value, documented in KB/s."""
    return _scaled(raw, _RATE_UNITS, "kb/s")


def link_width(raw: str | None) -> int | None:
    """ "16x" or "x16" -> 16."""
    value = text(raw)
    if value is None:
        return None
    match = re.search(r"(\d+)", value)
    return int(match.group(1)) if match else None


# PCIe transfer rate per lane (GT/s) -> generation, for the readers of AMD's tools (NVIDIA's
# report the generation itself).
PCIE_GEN_BY_GTS = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def flag(raw: str | None) -> bool | None:
    """Enabled/Disabled, Yes/No, Active/Not Active, On/Off -> bool."""
    value = text(raw)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in {"enabled", "yes", "active", "on", "true", "1"}:
        return True
    if lowered in {"disabled", "no", "not active", "off", "false", "0", "none"}:
        return False
    return None

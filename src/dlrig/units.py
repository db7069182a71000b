"""Human formatting of quantities, for evidence lines and reports (data keeps base units)."""

from __future__ import annotations


def human_bytes(value: int | float | None, binary: bool = True) -> str:
    if value is None:
        return "unknown"
    step = 1024.0 if binary else 1000.0
    units = (
        ("B", "KiB", "MiB", "GiB", "TiB", "PiB") if binary else ("B", "kB", "MB", "GB", "TB", "PB")
    )
    amount = float(value)
    for unit in units:
        if abs(amount) < step or unit == units[-1]:
            if unit == "B":
                return f"{int(amount)} B"
            return f"{amount:.1f} {unit}"
        amount /= step
    return f"{amount:.1f} {units[-1]}"


def human_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"

"""Intel Gaudi's support matrix (`gaudi_software.csv`): the firmware and the PyTorch each Gaudi
software release (driver, firmware, SynapseAI and hl-smi share its number) supports."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from dlrig.knowledge.tables import records
from dlrig.knowledge.versions import Version


@dataclass(frozen=True)
class GaudiRelease:
    """One Intel Gaudi software release (driver, firmware, SynapseAI and hl-smi share it)."""

    software_version: str
    firmware: str
    pytorch_version: str
    os: str
    source: str
    as_of: str


@functools.cache
def releases() -> tuple[GaudiRelease, ...]:
    return records("gaudi_software", GaudiRelease)


def release_for(version: str | None) -> GaudiRelease | None:
    """The support-matrix row of a driver or tool version ("1.19.1-6f47ddd" -> the 1.19 row:
    patch releases share their minor release's PyTorch)."""
    parsed = Version.parse((version or "").removeprefix("hl-").split("-")[0])
    if parsed is None:
        return None
    rows = [
        r
        for r in releases()
        if (v := Version.parse(r.software_version)) is not None
        and (v.major, v.minor) == (parsed.major, parsed.minor)
        and r.pytorch_version
    ]
    return rows[-1] if rows else None

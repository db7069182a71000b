"""PCIe generations: the usable throughput of a link, to judge host<->device copies against."""

from __future__ import annotations

import functools

from dlrig.knowledge.tables import rows


@functools.cache
def lane_gbs_per_direction() -> dict[int, float]:
    return {int(row["generation"]): float(row["lane_gbs_per_direction"]) for row in rows("pcie")}


def link_gbs_per_direction(generation: int | None, width: int | None) -> float | None:
    """Usable GB/s one way over a link of this generation and width; None when unknown."""
    if not generation or not width:
        return None
    per_lane = lane_gbs_per_direction().get(generation)
    return None if per_lane is None else per_lane * width

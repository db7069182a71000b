"""Cloud offers from plan_cloud_prices.csv: on-demand, spot and reserved, per provider and GPU.

Where a hyperscaler instance has an on-demand price but no spot price in the table, a spot
offer is derived with the spot_discount ASSUMPTION (the seeds' 70%), labelled as derived.
Lambda and RunPod's on-demand products have no spot market in the table and get none.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from dlrig.knowledge import plan as knowledge
from dlrig.plan.assume import Inputs

SPOT_PROVIDERS = ("aws", "gcp", "azure")


@dataclass(frozen=True)
class CloudOffer(knowledge.CloudPrice):
    """A row of plan_cloud_prices, or a spot offer derived from an on-demand row."""

    derived: bool = False

    @property
    def label(self) -> str:
        derived = " (spot price ASSUMED)" if self.derived else ""
        return f"{self.provider} {self.instance} {self.pricing}{derived}"

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_hour / self.gpus


def _offer(price: knowledge.CloudPrice, **changes: Any) -> CloudOffer:
    return CloudOffer(**{**dataclasses.asdict(price), **changes})


def offers(inputs: Inputs, gpus: tuple[str, ...] = ()) -> list[CloudOffer]:
    rows = [r for r in knowledge.cloud_prices() if not gpus or r.gpu in gpus]
    result = [_offer(r) for r in rows]
    with_spot = {(r.provider, r.instance) for r in rows if r.pricing == "spot"}
    for r in rows:
        if (
            r.pricing != "on_demand"
            or r.provider not in SPOT_PROVIDERS
            or (r.provider, r.instance) in with_spot
        ):
            continue
        discount = inputs.get("spot_discount")
        result.append(
            _offer(
                r,
                pricing="spot",
                usd_per_hour=r.usd_per_hour * (1 - inputs.number("spot_discount")),
                source=f"DERIVED from the on-demand price ({r.source}) and spot_discount "
                f"{discount.value} ({discount.source})",
                derived=True,
            )
        )
    return result

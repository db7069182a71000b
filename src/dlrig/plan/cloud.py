"""Cloud offers from plan_cloud_prices.csv: on-demand, spot and reserved, per provider and GPU.

Where a hyperscaler instance has an on-demand price but no spot price in the table, a spot
offer is derived with the spot_discount ASSUMPTION (the seeds' 70%), labelled as derived.
Lambda and RunPod's on-demand products have no spot market in the table and get none.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlrig.knowledge import plan as knowledge
from dlrig.plan.assume import Inputs

SPOT_PROVIDERS = ("aws", "gcp", "azure")


@dataclass(frozen=True)
class CloudOffer:
    provider: str
    instance: str
    gpu: str
    gpus: int
    pricing: str
    usd_per_hour: float
    region: str
    source: str
    as_of: str
    derived: bool = False

    @property
    def label(self) -> str:
        derived = " (spot price ASSUMED)" if self.derived else ""
        return f"{self.provider} {self.instance} {self.pricing}{derived}"

    @property
    def usd_per_gpu_hour(self) -> float:
        return self.usd_per_hour / self.gpus


def offers(inputs: Inputs, gpus: tuple[str, ...] = ()) -> list[CloudOffer]:
    rows = [r for r in knowledge.cloud_prices() if not gpus or r.gpu in gpus]
    result = [
        CloudOffer(
            r.provider,
            r.instance,
            r.gpu,
            r.gpus,
            r.pricing,
            r.usd_per_hour,
            r.region,
            r.source,
            r.as_of,
        )
        for r in rows
    ]
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
            CloudOffer(
                r.provider,
                r.instance,
                r.gpu,
                r.gpus,
                "spot",
                r.usd_per_hour * (1 - inputs.number("spot_discount")),
                r.region,
                f"DERIVED from the on-demand price ({r.source}) and spot_discount {discount.value} ({discount.source})",
                r.as_of,
                derived=True,
            )
        )
    return result

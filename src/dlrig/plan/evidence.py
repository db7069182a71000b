"""What `plan upgrade` reads and says: bench results, limits found, steps proposed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dlrig.bench import BenchResult
from dlrig.errors import InputError

TERMS = ("short", "mid", "long")


@dataclass(frozen=True)
class Limit:
    area: str  # input pipeline | GPU memory | compute | interconnect
    limited: bool | None  # None: the evidence does not say
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class Step:
    term: str
    change: str
    gain: str
    gain_factor: float | None  # throughput multiplier where one can be given
    cost_usd: float
    area: str
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cost_usd": round(self.cost_usd, 2)}


def load_bench(folder: str | Path) -> list[BenchResult]:
    """The results of a `dlrig bench --out DIR` folder (or its bench.json), typed."""
    path = Path(folder)
    path = path / "bench.json" if path.is_dir() else path
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(
            f"{path}: no bench.json", fix="give the folder `dlrig bench --out DIR` wrote"
        ) from None
    except (OSError, ValueError) as exc:
        raise InputError(
            f"{path}: not a readable bench.json ({exc})",
            fix="give the folder `dlrig bench --out DIR` wrote",
        ) from None
    if not isinstance(document, dict) or document.get("schema") != "dlrig.bench":
        raise InputError(
            f"{path}: not a dlrig bench document",
            fix="give the folder `dlrig bench --out DIR` wrote",
        )
    results = document.get("results")
    if not isinstance(results, list):
        results = []
    try:  # only the results: the machine and device are not what an upgrade reads
        return [BenchResult.from_dict(result) for result in results if isinstance(result, dict)]
    except (KeyError, ValueError) as exc:
        raise InputError(
            f"{path}: {exc}", fix="give the folder `dlrig bench --out DIR` wrote"
        ) from None


def bench_result(results: Sequence[BenchResult], part: str, test: str) -> BenchResult | None:
    return next((r for r in results if r.part == part and r.test == test), None)

"""`dlrig profile compare A B`: what changed between two runs, step by step.

A and B are what `dlrig profile` reads (traces, a folder of `trace-*.json.gz` from
`--out`) or a `dlrig profile --json` document. The comparison is of means over each run's
profiled steps and ranks: the step, each host phase, each GPU part, and the kernels whose time
per step moved most.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlrig.errors import InputError
from dlrig.inputs import check_readable_file
from dlrig.profile.kernels import short_name
from dlrig.profile.model import GPU_PARTS, HOST_PHASES, PART_LABELS, SCHEMA
from dlrig.profile.report import analyse
from dlrig.report import envelope

COMPARE_SCHEMA = "dlrig.profile.compare"
COMPARE_VERSION = 1
TOP_CHANGES = 8


@dataclass(frozen=True)
class Row:
    name: str
    a_ms: float
    b_ms: float

    @property
    def delta_ms(self) -> float:
        return self.b_ms - self.a_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "a_ms": round(self.a_ms, 3),
            "b_ms": round(self.b_ms, 3),
            "delta_ms": round(self.delta_ms, 3),
        }


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    step: Row
    host: tuple[Row, ...]
    gpu: tuple[Row, ...]
    kernels: tuple[Row, ...]
    verdict_a: str | None
    verdict_b: str | None

    @property
    def speedup(self) -> float | None:
        return self.step.a_ms / self.step.b_ms if self.step.b_ms > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return envelope(
            COMPARE_SCHEMA,
            COMPARE_VERSION,
            {
                "a": self.a,
                "b": self.b,
                "speedup": None if self.speedup is None else round(self.speedup, 4),
                "step": self.step.to_dict(),
                "host_ms": [r.to_dict() for r in self.host],
                "gpu_ms": [r.to_dict() for r in self.gpu],
                "kernels": [r.to_dict() for r in self.kernels],
                "verdict_a": self.verdict_a,
                "verdict_b": self.verdict_b,
            },
        )


def load_document(path: str) -> dict[str, Any]:
    """A run as a `dlrig.profile` document: read from JSON, or analysed from traces."""
    p = Path(path)
    if p.is_dir():
        return analyse([p]).to_dict()
    check_readable_file(p, "trace or dlrig profile document")
    with p.open("rb") as stream:
        head = stream.read(4096)
    if head[:2] != b"\x1f\x8b" and b'"schema"' in head and SCHEMA.encode() in head:
        document = json.loads(p.read_text(encoding="utf-8"))
        if document.get("schema") != SCHEMA:
            raise InputError(f"{p}: not a dlrig profile document", fix="give a trace")
        if document.get("schema_version") != 1:
            raise InputError(
                f"{p}: dlrig.profile schema_version {document.get('schema_version')!r} is "
                "not one this dlrig reads (1)",
                fix="compare with the dlrig that wrote it, or give the traces",
            )
        return dict(document)
    return analyse([p]).to_dict()


def _means(
    document: dict[str, Any],
) -> tuple[float, dict[str, float], dict[str, float], dict[str, float]]:
    ranks = document.get("ranks") or []
    steps = [s for r in ranks for s in r.get("steps", [])]
    if not steps:
        raise InputError("a run without steps cannot be compared", fix="give a profiled run")
    n = len(steps)
    step = sum(s["step_ms"] for s in steps) / n
    host = {k: sum(s["host_ms"].get(k, 0.0) for s in steps) / n for k in HOST_PHASES}
    gpu_steps = [s for s in steps if s.get("gpu_ms")]
    gpu = (
        {k: sum(s["gpu_ms"].get(k, 0.0) for s in gpu_steps) / len(gpu_steps) for k in GPU_PARTS}
        if gpu_steps
        else {}
    )
    kernels: dict[str, float] = {}
    for r in ranks:
        count = max(1, len(r.get("steps", [])))
        for row in r.get("top_kernels", []):
            kernels[row["name"]] = kernels.get(row["name"], 0.0) + row["total_ms"] / count
    kernels = {k: v / max(1, len(ranks)) for k, v in kernels.items()}
    return step, host, gpu, kernels


def compare(a: dict[str, Any], b: dict[str, Any], label_a: str, label_b: str) -> Comparison:
    step_a, host_a, gpu_a, kernels_a = _means(a)
    step_b, host_b, gpu_b, kernels_b = _means(b)
    names = set(kernels_a) | set(kernels_b)
    moved = sorted(
        (Row(n, kernels_a.get(n, 0.0), kernels_b.get(n, 0.0)) for n in names),
        key=lambda r: -abs(r.delta_ms),
    )[:TOP_CHANGES]
    gpu_rows = tuple(
        Row(k, gpu_a.get(k, 0.0), gpu_b.get(k, 0.0)) for k in GPU_PARTS if gpu_a or gpu_b
    )

    def verdict(document: dict[str, Any]) -> str | None:
        found = document.get("verdict")
        return str(found["cause"]) if isinstance(found, dict) else None

    return Comparison(
        a=label_a,
        b=label_b,
        step=Row("step", step_a, step_b),
        host=tuple(Row(k, host_a[k], host_b[k]) for k in HOST_PHASES),
        gpu=gpu_rows,
        kernels=tuple(moved),
        verdict_a=verdict(a),
        verdict_b=verdict(b),
    )


def render_text(comparison: Comparison, console: Any) -> None:
    from rich.table import Table
    from rich.text import Text

    speedup = comparison.speedup
    head = Text("B vs A: ", style="bold")
    if speedup is None:
        head.append("B has no step time")
    elif speedup >= 1:
        head.append(f"×{speedup:.2f} faster per step", style="bold green")
    else:
        head.append(f"×{1 / speedup:.2f} slower per step", style="bold red")
    head.append(f" ({comparison.step.a_ms:.1f} → {comparison.step.b_ms:.1f} ms)")
    console.print(head)
    console.print(Text(f"A: {comparison.a}\nB: {comparison.b}", style="dim"))
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("per step")
    table.add_column("A ms", justify="right")
    table.add_column("B ms", justify="right")
    table.add_column("change", justify="right")
    for row in (*comparison.host, *comparison.gpu):
        table.add_row(
            PART_LABELS.get(row.name, row.name),
            f"{row.a_ms:.1f}",
            f"{row.b_ms:.1f}",
            f"{row.delta_ms:+.1f}",
        )
    console.print(table)
    if comparison.kernels:
        kernels = Table(box=None, pad_edge=False, header_style="bold")
        kernels.add_column(
            "kernels that moved most", overflow="ellipsis", no_wrap=True, max_width=46
        )
        kernels.add_column("A ms", justify="right")
        kernels.add_column("B ms", justify="right")
        kernels.add_column("change", justify="right")
        for row in comparison.kernels:
            kernels.add_row(
                short_name(row.name, 46),
                f"{row.a_ms:.2f}",
                f"{row.b_ms:.2f}",
                f"{row.delta_ms:+.2f}",
            )
        console.print(kernels)
    console.print(
        f"verdict A: {comparison.verdict_a or 'no bottleneck'}; "
        f"verdict B: {comparison.verdict_b or 'no bottleneck'}"
    )

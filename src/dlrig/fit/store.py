"""A folder of stored trace bases, so that measuring dlrig against many rows does not re-trace.

Off unless `use(folder)` turns it on (benchmarks/fit_accuracy.py and its test do). A stored
basis is exactly what tracing produced, and it is used only when its fingerprint matches: the
torch / transformers / peft versions, the source of every module that shapes a trace, the
preset and autocast tables, the workload's fields and the content of its config file. Anything
else (a changed tracer, another transformers) traces again. Identical operators are stored once
with a count (the time model sums over operators, so this is exact); live-memory curves are
stored as their integer steps.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dlrig.fit.options import WORKLOAD_FIELDS
from dlrig.fit.tracedata import OpTable, Trace, affine
from dlrig.outputs import write_bytes_atomic

if TYPE_CHECKING:
    from dlrig.fit.options import Options
    from dlrig.fit.workload import Workload

_FOLDER: list[Path] = []
_WRITE: list[bool] = []
TRACER_MODULES = (
    "attention",
    "autocast",
    "build",
    "checkpointing",
    "compiled",
    "grouped",
    "hfconfig",
    "liger",
    "peft",
    "presets",
    "recorder",
    "step",
    "store",
    "tracedata",
    "tracing",
    "workload",
)
TABLES = ("fit_presets.toml", "fit_autocast.toml")
BATCH_FIELD = "batch_size"
_INTS = (
    "param_count",
    "trainable_count",
    "trainable_bytes",
    "frozen_bytes",
    "grad_bytes",
    "state_bytes",
    "events",
    "block_trainable",
    "block_frozen_bytes",
    "root_trainable",
    "root_frozen_bytes",
)


@dataclass
class Basis:
    """Traces of one workload at one or two batch sizes, per traced depth."""

    batches: tuple[int, ...]
    traces: dict[int, dict[int, Trace]]  # batch -> depth -> trace
    affine: bool  # other batches are affine combinations of the two

    def at(self, batch: int, depths: tuple[int, ...]) -> list[tuple[int, Trace]] | None:
        if batch in self.traces:
            return sorted(self.traces[batch].items())
        if not self.affine or len(self.batches) < 2:
            return None
        b1, b2 = self.batches[:2]
        return [
            (d, affine(self.traces[b1][d], self.traces[b2][d], b1, b2, batch))
            for d in sorted(self.traces[b1])
        ]


def basis_key(options: Options) -> tuple[object, ...]:
    """The workload fields except the batch size: one basis serves every batch. A config file
    is keyed by its content (its path and the name it is shown under do not change the trace)."""
    fields = {n: getattr(options, n) for n in WORKLOAD_FIELDS if n != BATCH_FIELD}
    if options.config is not None:
        path = Path(options.config)
        path = path / "config.json" if path.is_dir() else path
        fields["model"] = "config"
        fields["config"] = hashlib.sha256(path.read_bytes()).hexdigest()
    return tuple(fields.values())


@contextlib.contextmanager
def use(folder: Path, write: bool = True) -> Iterator[None]:
    """Load stored bases from `folder` (and store new ones there when `write`)."""
    _FOLDER.append(Path(folder))
    _WRITE.append(write)
    try:
        yield
    finally:
        _FOLDER.pop()
        _WRITE.pop()


@functools.cache
def code_fingerprint() -> str:
    import importlib.metadata

    digest = hashlib.sha256()
    for package_name in ("torch", "transformers", "peft"):
        try:
            digest.update(importlib.metadata.version(package_name).encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(b"-")
    package = resources.files("dlrig.fit")
    for module in TRACER_MODULES:
        digest.update(package.joinpath(f"{module}.py").read_bytes())
    for table in TABLES:
        digest.update(resources.files("dlrig.knowledge").joinpath("data", table).read_bytes())
    return digest.hexdigest()


def _key(options: Options) -> str:
    fields = [repr(v) for v in basis_key(options)]  # a config by its content, not its path
    return hashlib.sha256(json.dumps([code_fingerprint(), *fields]).encode()).hexdigest()[:24]


def _path(options: Options) -> Path | None:
    if not _FOLDER:
        return None
    return _FOLDER[-1] / f"{_key(options)}.npz"


def _merge(traces: list[Trace]) -> tuple[np.ndarray, np.ndarray]:
    """(index of each kept operator, count) merging operators identical in all `traces`."""
    columns = []
    for trace in traces:
        t = trace.ops
        columns += [t.name, t.phase, t.kind, t.dtype, t.nchw, t.flops, t.traffic]
    table = np.rec.fromarrays(columns)
    _, first, counts = np.unique(table, return_index=True, return_counts=True)
    order = np.argsort(first)
    return first[order], counts[order]


def save(options: Options, workload: Workload, basis: Basis) -> None:
    path = _path(options)
    if path is None or not _WRITE[-1]:
        return
    batches = list(basis.traces)
    depths = sorted(basis.traces[batches[0]])
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {"batches": batches, "affine": basis.affine, "traces": {}}
    for depth in depths:
        group = [basis.traces[b][depth] for b in batches]
        keep, counts = _merge(group) if basis.affine or len(batches) == 1 else (None, None)
        for batch, trace in zip(batches, group, strict=True):
            tag = f"{batch}_{depth}"
            t = trace.ops
            index = keep if keep is not None else np.arange(len(t))
            for name in ("name", "phase", "kind", "dtype", "nchw"):
                arrays[f"{tag}_{name}"] = getattr(t, name)[index]
            arrays[f"{tag}_flops"] = t.flops[index].astype(np.float32)
            arrays[f"{tag}_traffic"] = t.traffic[index].astype(np.float32)
            weights = t.weights()[index] if counts is None else counts * t.weights()[index]
            arrays[f"{tag}_count"] = weights.astype(np.int32)
            for curve, values in trace.curves.items():
                arrays[f"{tag}_curve_{curve}"] = np.diff(values, prepend=0.0).astype(np.int64)
            meta["traces"][tag] = {
                **{name: int(getattr(trace, name)) for name in _INTS},
                "names": list(t.names),
                "spans": {k: list(v) for k, v in trace.phase_spans.items()},
            }
    buffer = io.BytesIO()
    save_arrays: Any = np.savez_compressed  # its stub would let **arrays fill allow_pickle
    save_arrays(buffer, meta=np.array(json.dumps(meta)), **arrays)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, buffer.getvalue())


def load(options: Options, workload: Workload) -> Basis | None:
    path = _path(options)
    if path is None or not path.is_file():
        return None
    with np.load(path) as data:
        meta = json.loads(str(data["meta"]))
        traces: dict[int, dict[int, Trace]] = {}
        for tag, info in meta["traces"].items():
            batch, depth = (int(x) for x in tag.split("_"))
            ops = OpTable(
                names=tuple(info["names"]),
                name=data[f"{tag}_name"],
                phase=data[f"{tag}_phase"],
                kind=data[f"{tag}_kind"],
                dtype=data[f"{tag}_dtype"],
                nchw=data[f"{tag}_nchw"],
                flops=data[f"{tag}_flops"].astype(np.float64),
                traffic=data[f"{tag}_traffic"].astype(np.float64),
                count=data[f"{tag}_count"].astype(np.float64),
            )
            curves = {
                key.rsplit("_curve_", 1)[1]: np.cumsum(data[key]).astype(np.float64)
                for key in data.files
                if key.startswith(f"{tag}_curve_")
            }
            traces.setdefault(batch, {})[depth] = Trace(
                ops=ops,
                curves=curves,
                phase_spans={k: (int(v[0]), int(v[1])) for k, v in info["spans"].items()},
                **{name: info[name] for name in _INTS},
            )
    return Basis(tuple(meta["batches"]), traces, bool(meta["affine"]))

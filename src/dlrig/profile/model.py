"""What `dlrig profile` reports: per step, per rank, per run; plain frozen data."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dlrig import report
from dlrig.plain import from_plain
from dlrig.profile.device import DeviceActivity
from dlrig.report import envelope, rounded

SCHEMA = "dlrig.profile"
SCHEMA_VERSION = 1

# The phases of a step's wall time on the host, in the order they happen.
HOST_PHASES = ("data_wait", "forward", "backward", "optimizer", "other")
# What the GPU did over the same wall time; the parts add up to the step.
GPU_PARTS = ("compute", "communication_exposed", "memcpy", "idle_data_wait", "idle_host")
# How the report, the compare table and the report page name each part.
PART_LABELS = {
    "data_wait": "data wait",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "other": "other",
    "compute": "compute",
    "communication_exposed": "communication (exposed)",
    "memcpy": "copies",
    "idle_data_wait": "idle: waiting for data",
    "idle_host": "idle: host, launches, syncs",
}


@dataclass(frozen=True)
class StepProfile:
    """One training step: the host's phases and the GPU's use of the same wall time (ms)."""

    name: str
    start_ms: float  # from the first profiled step's start
    step_ms: float
    host: dict[str, float]  # HOST_PHASES -> ms
    launch_ms: float  # host time inside kernel-launch calls
    gpu: dict[str, float] | None  # GPU_PARTS -> ms; None on a CPU-only trace
    communication_ms: float = 0.0  # all communication, exposed and overlapped
    h2d_ms: float = 0.0
    kernels: int = 0
    flops: float = 0.0
    # GPU time (sum of event durations) by the host phase that launched it
    launched_in: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "start_ms": round(self.start_ms, 3),
            "step_ms": round(self.step_ms, 3),
            "host_ms": {k: round(v, 3) for k, v in self.host.items()},
            "launch_ms": round(self.launch_ms, 3),
            "gpu_ms": None if self.gpu is None else {k: round(v, 3) for k, v in self.gpu.items()},
            "communication_ms": round(self.communication_ms, 3),
            "h2d_ms": round(self.h2d_ms, 3),
            "kernels": self.kernels,
            "flops": self.flops,
            "gpu_ms_by_launching_phase": {k: round(v, 3) for k, v in self.launched_in.items()},
        }


@dataclass(frozen=True)
class KernelRow:
    name: str
    category: str
    count: int
    total_ms: float
    share: float  # of all GPU kernel time in the profiled steps, 0..1

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "category": self.category,
            "count": self.count,
            "total_ms": round(self.total_ms, 3),
            "share": round(self.share, 4),
        }


@dataclass(frozen=True)
class HtaSplit:
    """The split Holistic Trace Analysis's temporal breakdown reports, computed its way (so the
    two can be compared): kernels of the profiled iterations, over the span from the first
    one's start to the last one's end."""

    span_ms: float
    idle_pct: float
    compute_pct: float
    non_compute_pct: float
    iterations: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "span_ms": round(self.span_ms, 3),
            "idle_pct": round(self.idle_pct, 2),
            "compute_pct": round(self.compute_pct, 2),
            "non_compute_pct": round(self.non_compute_pct, 2),
            "iterations": list(self.iterations),
        }


@dataclass(frozen=True)
class Mfu:
    flops_per_step: float | None
    flops_source: str | None  # "FlopCounterMode" | "profiler with_flops" | None
    achieved_tflops: float | None
    peak_tflops: float | None
    precision: str | None
    gpu: str | None  # the catalogue id the peak came from
    value: float | None  # 0..1
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "flops_per_step": self.flops_per_step,
            "flops_source": self.flops_source,
            "achieved_tflops": rounded(self.achieved_tflops, 3),
            "peak_tflops": self.peak_tflops,
            "precision": self.precision,
            "gpu": self.gpu,
            "mfu": rounded(self.value, 4),
            "note": self.note,
        }


@dataclass(frozen=True, kw_only=True)
class Finding(report.Finding):
    """A cause the measured split points at (status warn), the change for it and what it
    should win."""

    gain: float  # expected speed-up of the step, as a factor (1.25 = 25 % faster)
    gain_basis: str  # how the gain follows from the split

    @classmethod
    def of(
        cls,
        cause: str,
        title: str,
        evidence: tuple[str, ...],
        fix: str,
        gain: float,
        gain_basis: str,
    ) -> Finding:
        return cls(
            id=f"profile.{cause}",
            status=report.Status.WARN,
            title=title,
            source="profile",
            evidence=tuple(evidence),
            fix=fix,
            cause=cause,
            gain=gain,
            gain_basis=gain_basis,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "title": self.title,
            "evidence": list(self.evidence),
            "fix": self.fix,
            "expected_speedup": round(self.gain, 3),
            "basis": self.gain_basis,
        }


@dataclass(frozen=True)
class RankProfile:
    path: str
    rank: int | None
    device: str | None
    vendor: str
    steps: tuple[StepProfile, ...]
    kernels: tuple[KernelRow, ...]
    categories: dict[str, float]  # category -> ms over the profiled steps
    hta: HtaSplit | None
    mfu: Mfu
    gemm_precision: dict[str, float]  # precision -> share of GEMM time
    optimizer_fused: bool | None = None  # None: no optimizer kernels seen
    optimizers: dict[str, Any] = field(default_factory=dict)  # live runs: class -> settings
    # How the DataLoader loads: "main process" (num_workers=0) or "worker processes"
    loader: str | None = None
    cpus_per_rank: int | None = None  # live runs: CPU cores this rank may use
    # live runs on a GPU machine: NVML/GPM counters over the profiled steps
    device_activity: DeviceActivity | None = None
    notes: tuple[str, ...] = ()

    @property
    def has_gpu(self) -> bool:
        return any(step.gpu is not None for step in self.steps)

    def mean(self, key: str, part: str | None = None) -> float:
        """The mean over steps of a StepProfile figure (`host`/`gpu` need `part`)."""
        values: list[float] = []
        for step in self.steps:
            value = getattr(step, key)
            if part is not None:
                value = None if value is None else value.get(part)
            if value is not None:
                values.append(float(value))
        return sum(values) / len(values) if values else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "rank": self.rank,
            "device": self.device,
            "vendor": self.vendor,
            # the mean of the steps as written, so a reader of the file gets the same figure
            "mean_step_ms": round(
                sum(round(step.step_ms, 3) for step in self.steps) / len(self.steps), 3
            )
            if self.steps
            else 0.0,
            "steps": [s.to_dict() for s in self.steps],
            "top_kernels": [k.to_dict() for k in self.kernels],
            "category_ms": {k: round(v, 3) for k, v in self.categories.items()},
            "gemm_precision": {k: round(v, 4) for k, v in self.gemm_precision.items()},
            "hta_temporal_breakdown": None if self.hta is None else self.hta.to_dict(),
            "mfu": self.mfu.to_dict(),
            "optimizer_fused": self.optimizer_fused,
            "optimizers": self.optimizers,
            "data_loader": self.loader,
            "cpus_per_rank": self.cpus_per_rank,
            "device_activity": None
            if self.device_activity is None
            else self.device_activity.to_dict(),
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class ProfileReport:
    ranks: tuple[RankProfile, ...]
    verdict: Finding | None  # the change that wins most
    findings: tuple[Finding, ...]  # every cause found, the verdict first
    stragglers: tuple[str, ...] = ()
    command: tuple[str, ...] | None = None
    exit_code: int | None = None
    notes: tuple[str, ...] = field(default=())

    @classmethod
    def from_dict(cls, document: dict[str, Any]) -> ProfileReport:
        """A saved `dlrig profile --json` document (keys a newer dlrig adds are dropped);
        ValueError names the first field that does not fit."""
        verdict, command = document.get("verdict"), document.get("command")
        ranks = document.get("ranks")
        if not isinstance(ranks, list):
            raise ValueError("profile.ranks: expected a list")
        return cls(
            ranks=tuple(_rank(rank, f"profile.ranks[{i}]") for i, rank in enumerate(ranks)),
            verdict=None if verdict is None else _finding(verdict, "profile.verdict"),
            findings=tuple(
                _finding(f, f"profile.findings[{i}]")
                for i, f in enumerate(document.get("findings") or ())
            ),
            stragglers=from_plain(
                tuple[str, ...], document.get("stragglers") or [], "profile.stragglers"
            ),
            command=None
            if command is None
            else from_plain(tuple[str, ...], command, "profile.command"),
            exit_code=from_plain(int | None, document.get("exit_code"), "profile.exit_code"),
            notes=from_plain(tuple[str, ...], document.get("notes") or [], "profile.notes"),
        )

    def to_dict(self) -> dict[str, Any]:
        return envelope(
            SCHEMA,
            SCHEMA_VERSION,
            {
                "verdict": None if self.verdict is None else self.verdict.to_dict(),
                "findings": [f.to_dict() for f in self.findings],
                "stragglers": list(self.stragglers),
                "command": None if self.command is None else list(self.command),
                "exit_code": self.exit_code,
                "ranks": [r.to_dict() for r in self.ranks],
                "notes": list(self.notes),
            },
        )


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _renamed(value: Any, where: str, names: dict[str, str]) -> dict[str, Any]:
    """The document's object with its keys as the dataclass's fields (`names`: key -> field)."""
    return {names.get(key, key): item for key, item in _object(value, where).items()}


def _step(value: Any, where: str) -> StepProfile:
    names = {"host_ms": "host", "gpu_ms": "gpu", "gpu_ms_by_launching_phase": "launched_in"}
    step: StepProfile = from_plain(StepProfile, _renamed(value, where, names), where, False)
    return step


def _finding(value: Any, where: str) -> Finding:
    d = _object(value, where)
    try:
        return Finding.of(
            from_plain(str, d["cause"], f"{where}.cause"),
            from_plain(str, d["title"], f"{where}.title"),
            from_plain(tuple[str, ...], d.get("evidence") or [], f"{where}.evidence"),
            from_plain(str, d["fix"], f"{where}.fix"),
            from_plain(float, d["expected_speedup"], f"{where}.expected_speedup"),
            from_plain(str, d["basis"], f"{where}.basis"),
        )
    except KeyError as exc:
        raise ValueError(f"{where}: no {exc}") from None


def _rank(value: Any, where: str) -> RankProfile:
    names = {
        "top_kernels": "kernels",
        "category_ms": "categories",
        "hta_temporal_breakdown": "hta",
        "data_loader": "loader",
    }
    d = _renamed(value, where, names)
    steps = d.pop("steps", None)
    if not isinstance(steps, list):
        raise ValueError(f"{where}.steps: expected a list")
    mfu = _renamed(d.pop("mfu", None), f"{where}.mfu", {"mfu": "value"})
    activity = d.pop("device_activity", None)
    if activity is not None:
        fixed = ("gpu", "samples", "note")
        a = _object(activity, f"{where}.device_activity")
        activity = {k: a.get(k) for k in fixed} | {
            "means": {k: v for k, v in a.items() if k not in fixed}
        }
    d.pop("mean_step_ms", None)  # recomputed from the steps
    d |= {"steps": [], "mfu": mfu, "device_activity": activity}
    rank: RankProfile = from_plain(RankProfile, d, where, False)
    return dataclasses.replace(
        rank, steps=tuple(_step(step, f"{where}.steps[{i}]") for i, step in enumerate(steps))
    )

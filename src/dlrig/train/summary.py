"""Where the time went, and what to change when the loop mostly waited for data.

Times are the host's view, summed over the run after its first step (start-up: lazy
initialisation, torch.compile's compilation): data wait is the time spent inside the
loader's `next()`; communication is the part of a gradient all-reduce the step waited for
(measured for dlrig's own all-reduce, and for DDP's with `measure_comm=True` under gloo;
otherwise it overlaps the backward pass and is counted in compute); compute is the rest of the step. When data wait is the largest share, the finding
is the shared `input_pipeline_bound` cause, with a `DataLoader(...)` line in the shape
`dlrig bench dataloader` prints and the command that measures the best one.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlrig import causes, report
from dlrig.outputs import write_text_atomic
from dlrig.report import envelope
from dlrig.train.log import Decision, RunLog, format_seconds

if TYPE_CHECKING:
    from dlrig.train.run import Run

SCHEMA = "dlrig.train"
SCHEMA_VERSION = 1
LAUNCHER_CHANNEL = "dlrig-train-summary"  # the memfd name `dlrig train` reads the summary from


@dataclass(frozen=True)
class TimeSplit:
    total_s: float
    data_wait_s: float
    comm_s: float

    @property
    def compute_s(self) -> float:
        return max(0.0, self.total_s - self.data_wait_s - self.comm_s)

    def shares(self) -> dict[str, float]:
        if self.total_s <= 0:
            return {"data_wait": 0.0, "compute": 0.0, "communication": 0.0}
        return {
            "data_wait": self.data_wait_s / self.total_s,
            "compute": self.compute_s / self.total_s,
            "communication": self.comm_s / self.total_s,
        }

    def to_dict(self) -> dict[str, float]:
        return {
            "total_s": round(self.total_s, 6),
            "data_wait_s": round(self.data_wait_s, 6),
            "compute_s": round(self.compute_s, 6),
            "communication_s": round(self.comm_s, 6),
        }


@dataclass(frozen=True, kw_only=True)
class Finding(report.Finding):
    """What the run's own measurements point at (status warn); `text` is what was measured."""

    text: str

    @classmethod
    def of(cls, cause: str, title: str, text: str, fix: str) -> Finding:
        return cls(
            id=f"train.{cause}",
            status=report.Status.WARN,
            title=title,
            source="train",
            evidence=(text,),
            fix=fix,
            cause=cause,
            text=text,
        )

    def to_dict(self) -> dict[str, str]:
        return {
            "cause": self.cause or "",
            "title": self.title,
            "text": self.text,
            "fix": self.fix or "",
        }


@dataclass(frozen=True)
class Summary:
    steps: int
    samples: int
    split: TimeSplit
    plan: dict[str, int]
    precision: str
    world_size: int
    stopped_by: str | None = None  # "max_steps" | "SIGTERM" | "SIGINT" | "SIGHUP" | None
    last_checkpoint: str | None = None
    decisions: tuple[Decision, ...] = ()
    findings: tuple[Finding, ...] = ()
    comm_measured: bool = True
    # The first step is start-up and is not in `split`: these are the steps and samples it covers.
    timed_steps: int = 0
    timed_samples: int = 0
    # A resumed run with nothing left to do: why (its max_steps or its epochs are done).
    nothing_left: str | None = None
    # A resumed run: the step and samples its checkpoint had; `steps` and `samples` count the
    # whole run, these say how much of it this process did.
    resumed_at_step: int = 0
    resumed_at_samples: int = 0

    @property
    def steps_this_process(self) -> int:
        return self.steps - self.resumed_at_step

    @property
    def samples_per_s(self) -> float:
        return self.timed_samples / self.split.total_s if self.split.total_s > 0 else 0.0

    @property
    def step_time_s(self) -> float | None:
        return self.split.total_s / self.timed_steps if self.timed_steps else None

    def to_dict(self) -> dict[str, Any]:
        return envelope(
            SCHEMA,
            SCHEMA_VERSION,
            {
                "steps": self.steps,
                "samples": self.samples,
                "samples_per_s": round(self.samples_per_s, 3),
                "step_time_s": round(self.step_time_s, 9) if self.step_time_s else None,
                "timed_steps": self.timed_steps,
                "time": self.split.to_dict(),
                "shares": {k: round(v, 4) for k, v in self.split.shares().items()},
                "communication_measured": self.comm_measured,
                "batch": self.plan,
                "precision": self.precision,
                "world_size": self.world_size,
                "stopped_by": self.stopped_by,
                "last_checkpoint": self.last_checkpoint,
                "decisions": [d.to_dict() for d in self.decisions],
                "findings": [f.to_dict() for f in self.findings],
                "nothing_left": self.nothing_left,
                "resumed_at_step": self.resumed_at_step,
                "steps_this_process": self.steps_this_process,
                "samples_this_process": self.samples - self.resumed_at_samples,
            },
        )

    def lines(self) -> list[str]:
        if self.nothing_left is not None:
            return [
                f"{self.steps} steps, {self.samples} samples, all before this resume: nothing "
                f"was left to train ({self.nothing_left})"
            ]
        split = self.split
        shares = split.shares()
        done = f"{self.steps} steps, {self.samples} samples"
        if self.resumed_at_step:
            done = (
                f"{self.steps_this_process} steps, {self.samples - self.resumed_at_samples} "
                f"samples in this process (resumed at step {self.resumed_at_step}; "
                f"{self.steps} steps, {self.samples} samples in all)"
            )
        out = [
            f"{done}; after the first step "
            f"{format_seconds(split.total_s)}, {self.samples_per_s:.1f} samples/s"
            + (f", {format_seconds(self.step_time_s)} a step" if self.step_time_s else ""),
            "where the time went: "
            f"data wait {shares['data_wait']:.0%} ({format_seconds(split.data_wait_s)}), "
            f"compute {shares['compute']:.0%} ({format_seconds(split.compute_s)}), "
            + (
                f"communication {shares['communication']:.0%} ({format_seconds(split.comm_s)})"
                if self.comm_measured
                else "communication not measured (DDP overlaps it with backward; counted in "
                "compute; Run(measure_comm=True) times it under gloo)"
            ),
        ]
        for finding in self.findings:
            out.append(f"{finding.title}: {finding.text}")
            out.append(f"  fix: {finding.fix}")
        return out


def input_bound(
    split: TimeSplit, loader: Any, per_rank_batch: int | None, cuda: bool
) -> Finding | None:
    """The `input_pipeline_bound` finding when data wait is the largest share of the time."""
    shares = split.shares()
    if split.total_s <= 0 or shares["data_wait"] < max(shares["compute"], shares["communication"]):
        return None
    from dlrig.bench.dataloader import LoaderSettings  # lazy: only for an input-bound run

    cause = causes.get("input_pipeline_bound")
    current = int(getattr(loader, "num_workers", 0) or 0)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    per_rank_cores = max(1, (cores or 1) // max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    workers = max(current * 2, min(per_rank_cores, 8), 1)
    settings = LoaderSettings(
        num_workers=workers,
        prefetch_factor=4 if current >= workers else 2,
        pin_memory=cuda,
        persistent_workers=True,
    )
    batch = per_rank_batch or getattr(loader, "batch_size", None) or 1
    line = settings.line(batch)
    return Finding.of(
        cause.id,
        cause.title,
        f"the loop waited for data {shares['data_wait']:.0%} of the time "
        f"({format_seconds(split.data_wait_s)} of {format_seconds(split.total_s)}) with "
        f"num_workers={current}",
        f"try {line}; measure the best settings for your dataset with `dlrig bench dataloader "
        f"--dataset module:factory --batch-size {batch}`",
    )


def summarize(run: Run) -> Summary:
    """The summary of a run that has ended."""
    engine = run.engine
    assert engine is not None
    total = (time.perf_counter() - engine.started) if engine.started is not None else 0.0
    split_time = TimeSplit(total, run.timing.data_wait_s, engine.comm_s)
    findings = []
    loader = run.loader.loader if run.loader is not None else None
    flagged = input_bound(
        split_time,
        loader,
        run.plan.per_rank if run.plan else None,
        run.device.type == "cuda",
    )
    if flagged is not None:
        findings.append(flagged)
    summary = Summary(
        steps=run.steps,
        samples=run.timing.samples,
        split=split_time,
        plan=engine.plan.to_dict() if engine.plan is not None else {},
        precision=run.precision.name,
        world_size=run.world.world_size,
        stopped_by=run.stopped_by,
        last_checkpoint=str(run.last_checkpoint) if run.last_checkpoint else None,
        decisions=tuple(run.log.decisions),
        findings=tuple(findings),
        timed_steps=run.steps - run.timing.start_step if engine.started else 0,
        timed_samples=run.timing.samples - run.timing.start_samples,
        comm_measured=run.comm_measured,
        nothing_left=run.nothing_left,
        resumed_at_step=run.timing.resumed_step,
        resumed_at_samples=run.timing.resumed_samples,
    )
    return summary


def hand_to_launcher(summary: Summary, log: RunLog) -> None:
    """The summary for `dlrig train`, where it names in DLRIG_TRAIN_SUMMARY (nothing to do when
    the script runs without it). Its in-memory file (/proc/PID/fd/N) is written in place; a
    path elsewhere atomically. A summary that cannot be handed over costs a line, never the
    finished run."""
    import json

    target = os.environ.get("DLRIG_TRAIN_SUMMARY")
    if not target:
        return
    text = json.dumps(summary.to_dict(), indent=2) + "\n"
    try:
        if target.startswith("/proc/"):
            # On another node (a launcher's srun) the same /proc path is some other process's
            # file, or none: write only into dlrig train's own channel.
            if not os.readlink(target).startswith(f"/memfd:{LAUNCHER_CHANNEL}"):
                log.say(f"the summary for dlrig train was not handed over ({target} is not its)")
                return
            with open(target, "w", encoding="utf-8") as stream:
                stream.write(text)
        else:
            write_text_atomic(target, text)
    except OSError as exc:
        log.say(f"the summary for dlrig train was not handed over ({target}: {exc.strerror})")

"""`Run`: the facade. The loop stays the user's; the run does the parts people get wrong.

    run = Run(precision="bf16", global_batch=256, micro_batch=32, checkpoint_dir="ckpt",
              checkpoint_every_steps=500, log_dir="runs/a")
    model, optimizer = run.setup(model, optimizer, scheduler)
    loader = run.setup_dataloader(loader)
    for epoch in run.epochs(10):
        for x, y in loader:
            loss = run.step(lambda x, y: F.cross_entropy(model(x), y), x, y)
    summary = run.finish()

`step(loss_fn, *batch)` cuts the batch into micro-batches, runs `loss_fn` on each under
autocast, backpropagates (DDP's all-reduce only on the last micro-step), takes the optimizer
step and zeroes the gradients. Per step it costs a few attribute reads and one comparison
against the next step at which anything else (logging, a checkpoint, the end) is due.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Unpack

import torch

from dlrig import profile
from dlrig.train import backoff as backoff_policy
from dlrig.train import checkpoint as ckpt
from dlrig.train import (
    distributed,
    observe,
    precision,
    profiling,
    resume,
    stopping,
    switches,
)
from dlrig.train.accumulation import BatchPlan
from dlrig.train.data import StopFlag, Timing, TrainLoader
from dlrig.train.loaders import generators_of, rebuild
from dlrig.train.log import RunLog
from dlrig.train.options import OptionFields, Options
from dlrig.train.precision import OverflowWatch, TrainError
from dlrig.train.steps import StepEngine
from dlrig.train.stopping import StopSignals
from dlrig.train.summary import Summary, hand_to_launcher, summarize

_NEVER = 1 << 62


class Run:
    """One training run: `Run(max_steps=..., checkpoint_dir=...)` (the fields of `Options`),
    `run.setup(model, optimizer)`, `run.setup_dataloader(loader)`, then for each batch of
    `run.epochs(n)` a `run.step(loss_fn, *batch)`, and `run.finish()`. DDP, precision,
    checkpoints, OOM back-off and the time split are its work; `dlrig train -- python
    script.py` reports it."""

    def __init__(self, options: Options | None = None, **fields: Unpack[OptionFields]) -> None:
        self.options = options if options is not None else Options(**fields)
        o = self.options
        self.world = distributed.init(o.timeout_s)
        self.log = RunLog(self.world.rank, self.world.world_size, quiet=o.quiet)
        if self.world.distributed:
            self.log.decide(
                "ddp",
                f"DDP over {self.world.world_size} processes ({self.world.backend} for "
                f"gradients, gloo for control messages), collective timeout {o.timeout_s:g} s",
            )
        self.device = self.world.device
        self.precision = precision.choose(o.precision, self.device, self.log)
        precision.enable_tf32(self.device, self.log)
        self.timing = Timing()
        self.stop = StopFlag()
        self.steps = 0
        self.stopped_by: str | None = None
        self.module: torch.nn.Module | None = None
        self.model: torch.nn.Module | None = None
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.loader: TrainLoader | None = None
        self.plan: BatchPlan | None = None
        self.engine: StepEngine | None = None
        self.checkpointer: ckpt.Checkpointer | None = None
        self.last_checkpoint: Path | None = None
        self.resume_state: tuple[dict[str, Any], dict[str, Any] | None, Path] | None = None
        self.sharded = False
        self.signals = StopSignals(self._on_signal)
        self._installed_signals = False
        # Set when a resumed run has nothing left to do (its max_steps or epochs are done).
        self.nothing_left: str | None = None
        self._next_log = _NEVER
        self._next_checkpoint = _NEVER
        self.observer: observe.Observer | None = None
        self.profiler: profile.Session | None = None
        self.profile_report: profile.ProfileReport | None = None  # after finish(), if profiled
        self._closed = False

    # --- properties ----------------------------------------------------------------------

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def world_size(self) -> int:
        return self.world.world_size

    @property
    def is_main(self) -> bool:
        return self.world.rank == 0

    @property
    def stop_signal(self) -> str | None:
        """The stop signal that arrived ("SIGTERM", "SIGINT", "SIGHUP"), None before one does.
        The next `step` ends with a checkpoint and the exit; a long loop of your own
        (evaluation) can check this to get there sooner."""
        return self.signals.name

    @property
    def epoch(self) -> int:
        return self.loader.position.epoch if self.loader is not None else 0

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The run's autocast, for evaluation or anything outside `step`."""
        return self.precision.autocast()

    # --- setup ---------------------------------------------------------------------------

    def setup(
        self, model: torch.nn.Module, optimizer: Any, scheduler: Any = None
    ) -> tuple[torch.nn.Module, Any]:
        """Move, wrap (activation checkpointing, DDP, compile), resume; returns what to use."""
        o = self.options
        from torch.nn.parallel import DistributedDataParallel

        module = model.module if isinstance(model, DistributedDataParallel) else model
        if any(p.device != self.device for p in module.parameters()):
            module.to(self.device)
            self.log.decide("device", f"model moved to {self.device}")
        switches.apply_activation_checkpointing(module, o.activation_checkpointing, self.log)
        self.sharded = distributed.is_fsdp(module) or o.checkpoint_format == "dcp"
        fsdp = distributed.is_fsdp(module)
        wrapped: torch.nn.Module = model
        ddp: Any = None
        if isinstance(model, DistributedDataParallel):
            ddp = model
        elif self.world.distributed and not fsdp:
            ddp = distributed.wrap_ddp(module, self.world)
            wrapped = ddp
        self.module, self.optimizer, self.scheduler = module, optimizer, scheduler
        self.model = switches.apply_compile(wrapped, o.compile, self.log)
        backoff_on, agreed = backoff_policy.choose(
            o.oom_backoff, self.device, fsdp, ddp is not None, module, self.world, self.log
        )
        scaler = self.precision.scaler()
        self.engine = StepEngine(
            run=self,
            model=self.model,
            ddp=ddp,
            optimizer=optimizer,
            scheduler=scheduler,
            scaler=scaler,
            overflow=OverflowWatch(scaler, o.fp16_overflow_streak) if scaler else None,
            agreed=agreed,
            backoff=backoff_on,
        )
        if o.measure_comm and ddp is not None and agreed is None and self.world.backend == "gloo":
            self.engine.install_comm_timer(ddp)
            self.log.decide("measure_comm", "gradient all-reduce timed by a DDP comm hook")
        if o.checkpoint_dir is not None:
            self.checkpointer = ckpt.Checkpointer(
                Path(o.checkpoint_dir), o.keep_checkpoints, self.world, self.sharded
            )
            if o.resume:
                self._load_latest()
        if self.resume_state is not None:
            resume.apply_training(self)
        if o.save_on_sigterm:
            self._install_signals()
        self._start_observer()
        self.profiler = profiling.start(self.options, self.log)
        if self.loader is not None:
            self._finish_plan()
        return self.model, optimizer

    def setup_dataloader(self, loader: Any) -> TrainLoader:
        """The loader to iterate: sharded over the ranks, resumable, timed."""
        if (
            self.options.checkpoint_dir is not None
            and self.options.resume
            and not self.resume_state
        ):
            self._load_latest()
        global_batch = self.options.global_batch
        if global_batch is None and self.resume_state is not None:
            global_batch = self.resume_state[0]["counters"].get("plan", {}).get("global_batch")
        rebuilt, batches, per_rank = rebuild(loader, self.world, global_batch, self.log)
        self.loader = TrainLoader(
            rebuilt, batches, self.timing, self.stop, generators_of(loader), self.log
        )
        micro = self.options.micro_batch
        if self.resume_state is not None:
            micro = self.resume_state[0]["counters"].get("plan", {}).get("micro_batch", micro)
        elif micro is None and self.options.accumulation:
            micro = max(1, -(-per_rank // self.options.accumulation))
        plan_global = per_rank * self.world.world_size if batches is not None and per_rank else None
        self.plan = BatchPlan(
            plan_global or per_rank, self.world.world_size, micro or per_rank or (1 << 30)
        )
        if self.resume_state is not None:
            resume.apply_data(self, self.loader)
        if self.engine is not None:
            self._finish_plan()
        return self.loader

    def _finish_plan(self) -> None:
        assert self.plan is not None and self.engine is not None
        self.engine.set_plan(self.plan)
        previous = (
            self.resume_state[0]["counters"].get("plan") if self.resume_state else None
        ) or {}
        was = previous.get("world_size")
        change = (
            f" (kept from {was} rank{'s' if was != 1 else ''})"
            if was and was != (self.world.world_size)
            else ""
        )
        self.log.decide("batch", self.plan.describe() + change)

    def _load_latest(self) -> None:
        resume.load_latest(self)

    def _install_signals(self) -> None:
        self._installed_signals = self.signals.install(self.log)

    def _on_signal(self, signum: int) -> None:
        """In the signal handler: make the step engine stop at the end of this step."""
        if self.engine is not None:
            self.engine.next_event = 0
        stopping.announce(self.log, signum)

    def _start_observer(self) -> None:
        o = self.options
        self.observer = observe.for_run(o, self.log, self.rank, self.device.type == "cuda")
        if self.observer is not None:
            self.observer.reset(self.steps, self.timing.samples, 0.0, 0.0)
            self._next_log = (self.steps // o.log_every_steps + 1) * o.log_every_steps

    # --- the step ------------------------------------------------------------------------

    def step(self, loss_fn: Callable[..., torch.Tensor], *batch: Any) -> torch.Tensor:
        """One optimizer step over `batch` (split into micro-batches); the detached loss."""
        engine = self.engine
        if engine is None:
            raise TrainError("Run.step before Run.setup", fix="call run.setup(model, optimizer)")
        return engine.step(loss_fn, batch)

    def next_event(self) -> int:
        o = self.options
        candidates = [self._next_log, self._next_checkpoint]
        if o.max_steps is not None:
            candidates.append(o.max_steps)
        return min(candidates)

    @property
    def comm_measured(self) -> bool:
        """Whether `engine.comm_s` is a measurement: one process has no communication; DDP's
        all-reduce is timed only by the agreed backoff or the gloo hook, otherwise it stays 0."""
        engine = self.engine
        return not self.world.distributed or (
            engine is not None and (engine.agreed is not None or engine.comm_timer is not None)
        )

    def on_event(self, loss: torch.Tensor) -> None:
        """Whatever is due at this step: the end, a log line, a checkpoint, a SIGTERM."""
        o = self.options
        step = self.steps
        if o.max_steps is not None and step >= o.max_steps:
            self.stop.requested = True
            self.stopped_by = "max_steps"
        if self.observer is not None and step >= self._next_log:
            lr = self.optimizer.param_groups[0]["lr"] if self.optimizer is not None else None
            assert self.engine is not None
            self.observer.record(
                step,
                self.timing.samples,
                self.timing.data_wait_s,
                self.engine.comm_s if self.comm_measured else None,
                loss,
                lr,
                self.epoch,
            )
            self._next_log = (step // o.log_every_steps + 1) * o.log_every_steps
        if o.checkpoint_every_steps is not None and step >= self._next_checkpoint:
            self.save()
        self.arm()
        if self.signals.signum is not None:
            stopping.exit_with_checkpoint(self, self.signals.signum)

    def arm(self) -> None:
        """Set the next step at which `on_event` must run."""
        o = self.options
        if o.checkpoint_every_steps is not None:
            every = o.checkpoint_every_steps
            self._next_checkpoint = (self.steps // every + 1) * every
        if o.max_steps is not None and self.steps >= o.max_steps and not self.stop.requested:
            # Resumed from a run that had already finished.
            self.stop.requested = True
            self.stopped_by = "max_steps"
            self._nothing_left(f"max_steps={o.max_steps} is reached")
        assert self.engine is not None
        self.engine.next_event = 0 if self.signals.signum is not None else self.next_event()

    def _nothing_left(self, reason: str) -> None:
        """A resumed run whose work is done: say so once, instead of training nothing."""
        if self.nothing_left is not None or self.resume_state is None:
            return
        self.nothing_left = reason
        self.log.say(
            f"nothing left to train: {reason} (the checkpoint {self.resume_state[2]} is of "
            f"step {self.steps})"
        )

    # --- loops, checkpoints, the end -----------------------------------------------------

    def epochs(self, count: int) -> Iterator[int]:
        """Epoch numbers from where the run stands (after a resume: the saved epoch) to count."""
        first = True
        while not self.stop.requested:
            epoch = self.epoch
            if epoch >= count:
                if first and self.resume_state is not None:
                    done = "epochs are" if count != 1 else "epoch is"
                    self._nothing_left(f"the {count} {done} done")
                return
            first = False
            yield epoch
            if self.loader is not None and self.loader.position.epoch == epoch:
                if self.stop.requested:
                    return
                # The loop left the epoch early (a `break`): the next one starts afresh.
                self.loader.position.epoch += 1
                self.loader.position.consumed = 0
                self.loader.position.order = None

    def save(self) -> Path:
        """Write a checkpoint of this step now (every rank must call it)."""
        path = resume.save(self)
        self.arm()
        return path

    def finish(self) -> Summary:
        """End the run: a last checkpoint, the ranks' agreement, the summary."""
        engine = self.engine
        if engine is None:
            raise TrainError("Run.finish before Run.setup", fix="call run.setup first")
        if (
            self.checkpointer is not None
            and self.nothing_left is None
            and (
                self.last_checkpoint is None
                or not self.last_checkpoint.name.endswith(ckpt.step_dir_name(self.steps))
            )
        ):
            self.save()
        if self.world.distributed:
            self.world.barrier("the end of training")
            low, high = self.world.all_max([-self.steps, self.steps])
            if -low != high:
                raise TrainError(
                    f"the ranks took different numbers of steps ({-low} to {high})",
                    fix="give every rank the same number of batches (setup_dataloader does) "
                    "and call run.step once per batch on every rank",
                    cause="collective_timeout_uneven_data",
                )
        summary = summarize(self)
        session, self.profiler = self.profiler, None
        if session is not None:
            self.profile_report = profiling.finish(session, self.options, self.log, self.is_main)
        if self.is_main:
            for line in summary.lines():
                self.log.say(line)
            hand_to_launcher(summary, self.log)
        self.close()
        return summary

    def close(self, failing: bool = False) -> None:
        """Stop the observer, give SIGTERM back, leave the process group if dlrig made it
        (`failing`: on the way out with an exception, without waiting for the other ranks)."""
        if self._closed:
            return
        self._closed = True
        if self.observer is not None:
            self.observer.close()
        if self.profiler is not None:  # a run closed without finish()
            self.profiler.__exit__(None, None, None)
            self.profiler = None
        if self._installed_signals:
            self.signals.restore()
            self._installed_signals = False
        self.world.close(failing)

    def __enter__(self) -> Run:
        return self

    def __exit__(self, kind: object, *rest: object) -> None:
        self.close(failing=kind is not None)

"""The hot path: one optimizer step, with nothing in it that the step does not need.

Everything optional is decided before the first step and kept as plain attributes (`None` when
off), so a step with every feature off runs the same calls as a plain loop plus a counter, a
clock read and one comparison. Try blocks cost nothing until something is raised (Python 3.11).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from dlrig.train import backoff as backoff_policy
from dlrig.train.accumulation import AgreedGradients, BatchPlan, batch_length, split
from dlrig.train.precision import OverflowWatch, TrainError

if TYPE_CHECKING:
    from dlrig.train.run import Run

_NO_SPLIT = 1 << 62
_COLLECTIVE_WORDS = ("Timed out", "timed out", "closed by peer", "Connection reset", "NCCL", "gloo")


class CommTimer:
    """A DDP comm hook (gloo) that all-reduces as DDP does and notes when it launched.

    The part of the last bucket's all-reduce that the backward pass waits for is the
    communication the step could not hide; `launches` counts all-reduces (one per bucket per
    synchronised backward: the proof that `no_sync` held the others back).
    """

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.last_launch: float | None = None
        self.launches = 0


def _timed_allreduce(timer: CommTimer, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    timer.last_launch = time.perf_counter()
    timer.launches += 1
    tensor = bucket.buffer()
    tensor.div_(timer.world_size)
    work: Any = dist.all_reduce(tensor, async_op=True)
    future: torch.futures.Future[torch.Tensor] = work.get_future().then(
        lambda done: done.value()[0]
    )
    return future


# DDP checks a hook's annotations as objects; `from __future__ import annotations` made them
# strings.
_timed_allreduce.__annotations__ = {
    "timer": CommTimer,
    "bucket": dist.GradBucket,  # type: ignore[attr-defined]
    "return": torch.futures.Future[torch.Tensor],
}


def _looks_collective(exc: BaseException) -> bool:
    if isinstance(exc, getattr(dist, "DistBackendError", ())):
        return True
    text = str(exc)
    return any(word in text for word in _COLLECTIVE_WORDS)


@dataclass(eq=False)
class StepEngine:
    run: Run
    model: torch.nn.Module
    ddp: Any
    optimizer: Any
    scheduler: Any
    scaler: torch.amp.GradScaler | None
    overflow: OverflowWatch | None
    agreed: AgreedGradients | None
    backoff: bool
    plan: BatchPlan | None = field(default=None, init=False)
    micro: int = field(default=_NO_SPLIT, init=False)
    next_event: int = field(default=0, init=False)
    comm_s: float = field(default=0.0, init=False)
    comm_timer: CommTimer | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        # Read from the run once, so the step reads one attribute instead of a chain.
        run = self.run
        self.timing = run.timing
        self.world_size = run.world.world_size
        self.autocast = None if run.precision.dtype is None else run.precision.autocast
        self.clip = run.options.clip_grad_norm
        self.injector = run.options.inject_oom
        self.params = [p for p in run.module.parameters()] if run.module is not None else []

    @property
    def started(self) -> float | None:
        return self.timing.started

    def install_comm_timer(self, ddp: Any) -> None:
        self.comm_timer = CommTimer(self.world_size)
        ddp.register_comm_hook(self.comm_timer, _timed_allreduce)

    def set_plan(self, plan: BatchPlan) -> None:
        self.plan = plan
        split_needed = plan.micro_batch < (plan.per_rank or _NO_SPLIT)
        self.micro = plan.micro_batch if split_needed else _NO_SPLIT
        self.run.plan = plan
        self.run.arm()

    # --- one step ------------------------------------------------------------------------

    def step(self, loss_fn: Callable[..., torch.Tensor], batch: tuple[Any, ...]) -> torch.Tensor:
        timing = self.timing
        if self.plan is None:
            self._plan_from(batch)
        run = self.run
        while True:
            failed = 0
            try:
                loss = self._forward_backward(loss_fn, batch)
            except torch.OutOfMemoryError:
                if not self.backoff:
                    raise
                failed = 1
            except RuntimeError as exc:
                if self.world_size > 1 and _looks_collective(exc):
                    raise run.world.find_late(
                        f"the gradient all-reduce of step {run.steps + 1}", exc
                    ) from None
                raise
            if self.agreed is not None:
                started = time.perf_counter()
                try:
                    failed = self.agreed.reduce(failed > 0)
                except RuntimeError as exc:
                    raise run.world.find_late(
                        f"the gradient all-reduce of step {run.steps + 1}", exc
                    ) from None
                self.comm_s += time.perf_counter() - started
            if not failed:
                break
            self._back_off(failed)
        self._optimizer_step()
        run.steps += 1
        timing.samples += (batch_length(batch) or 0) * self.world_size
        if timing.started is None:
            timing.started = time.perf_counter()
            timing.start_step = run.steps
            timing.start_samples = timing.samples
            self.comm_s = 0.0
        if run.steps >= self.next_event:
            run.on_event(loss)
        return loss

    def _forward_backward(
        self, loss_fn: Callable[..., torch.Tensor], batch: tuple[Any, ...]
    ) -> torch.Tensor:
        autocast = self.autocast
        scaler = self.scaler
        injector = self.injector
        hold = self.ddp.no_sync if self.agreed is not None else None
        if self.micro == _NO_SPLIT:
            if injector is not None:
                self._inject(batch)
            with hold() if hold is not None else contextlib.nullcontext():
                if autocast is None:
                    loss = loss_fn(*batch)
                else:
                    with autocast():
                        loss = loss_fn(*batch)
                (loss if scaler is None else scaler.scale(loss)).backward()  # type: ignore[no-untyped-call]
            self._note_comm()
            return loss.detach()
        parts = split(batch, self.micro)
        last = len(parts) - 1
        total: torch.Tensor | None = None
        for index, (micro_batch, weight) in enumerate(parts):
            if injector is not None:
                self._inject(micro_batch)
            if hold is None and index < last and self.ddp is not None:
                hold_this = self.ddp.no_sync()
            elif hold is not None:
                hold_this = hold()
            else:
                hold_this = contextlib.nullcontext()
            with hold_this:
                if autocast is None:
                    loss = loss_fn(*micro_batch)
                else:
                    with autocast():
                        loss = loss_fn(*micro_batch)
                weighted = loss * weight
                (weighted if scaler is None else scaler.scale(weighted)).backward()  # type: ignore[no-untyped-call]
            part = loss.detach() * weight
            total = part if total is None else total + part
        self._note_comm()
        assert total is not None
        return total

    def _inject(self, micro_batch: tuple[Any, ...]) -> None:
        assert self.injector is not None
        size = batch_length(micro_batch) or 0
        self.injector.check(self.run.world.rank, self.run.steps + 1, size)

    def _note_comm(self) -> None:
        timer = self.comm_timer
        if timer is not None and timer.last_launch is not None:
            self.comm_s += time.perf_counter() - timer.last_launch
            timer.last_launch = None

    def _optimizer_step(self) -> None:
        optimizer = self.optimizer
        scaler = self.scaler
        if scaler is not None:
            if self.clip is not None:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(self.params, self.clip)
            scaler.step(optimizer)
            scaler.update()
            assert self.overflow is not None
            try:
                self.overflow.after_update(self.run.steps + 1)
            except TrainError as stop:
                self.run.log.say(str(stop), everywhere=True)
                raise
        else:
            if self.clip is not None:
                torch.nn.utils.clip_grad_norm_(self.params, self.clip)
            optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        if self.agreed is not None:
            self.agreed.zero()
        else:
            optimizer.zero_grad(set_to_none=True)

    # --- back-off --------------------------------------------------------------------------

    def _back_off(self, failed: int) -> None:
        backoff_policy.release_memory(self.run.device)
        if self.agreed is not None:
            self.agreed.zero()
        else:
            self.optimizer.zero_grad(set_to_none=True)
        backoff_policy.reset_scaler(self.scaler)
        assert self.plan is not None
        smaller = backoff_policy.next_plan(self.plan, self.run.steps + 1, failed, self.run.log)
        self.set_plan(smaller)

    def _plan_from(self, batch: tuple[Any, ...]) -> None:
        """No loader of ours: the first batch sets the per-rank batch."""
        length = batch_length(batch) or 1
        options = self.run.options
        micro = options.micro_batch
        if micro is None and options.accumulation:
            micro = max(1, -(-length // options.accumulation))
        plan = BatchPlan(length * self.world_size, self.world_size, micro or length)
        self.set_plan(plan)
        self.run.log.decide("batch", plan.describe())

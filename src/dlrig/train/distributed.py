"""The process group, from torchrun's environment, and collectives that fail with a rank's name.

torchrun (and Slurm's srun through it) sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT. NCCL carries the gradients on GPUs, gloo on the CPU. A second, gloo-only group
("control") carries the few small messages dlrig needs (the sampler's order, the monitored
barrier that names a slow rank): gloo's `monitored_barrier` is the one collective that reports
*which* rank did not arrive, and a timed-out gradient all-reduce closes its own group's pairs,
so the question "who was late?" must be asked on another group.
"""

from __future__ import annotations

import atexit
import contextlib
import datetime
import gc
import os
import re
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from dlrig.errors import InputError
from dlrig.train.precision import TrainError

_FAILED_RANKS = re.compile(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier")


@dataclass
class World:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str | None = None
    control: Any = None  # the gloo group, None in one process
    timeout_s: float = 600.0
    owns_group: bool = False

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def barrier(self, what: str) -> None:
        """All ranks meet here, or rank 0 raises naming the ranks that did not."""
        if not self.distributed:
            return
        try:
            dist.monitored_barrier(
                group=self.control,
                timeout=datetime.timedelta(seconds=self.timeout_s),
                wait_all_ranks=True,
            )
        except RuntimeError as exc:
            raise self.late_error(what, exc) from None

    def late_error(self, what: str, exc: BaseException) -> TrainError:
        """The error for a collective that failed: which rank was late, and what to do."""
        text = str(exc)
        found = _FAILED_RANKS.search(text)
        if found:
            ranks = found.group(1).strip().rstrip(",")
            return TrainError(
                f"rank {ranks} did not reach {what} within {self.timeout_s:g} s (rank "
                f"{self.rank} waited)",
                fix=f"look at rank {ranks}'s own output for an error or a stall (rank-only work "
                "such as evaluation or saving, a stuck DataLoader worker, fewer batches than the "
                "others); if the work is legitimate raise timeout_s",
                cause="nccl_timeout",
            )
        if "closed by peer" in text or "Connection reset" in text:
            return TrainError(
                f"rank {self.rank}: {what} failed because another rank gave up waiting for this "
                f"one (timeout {self.timeout_s:g} s): this rank arrived late",
                fix=f"look at what rank {self.rank} did before {what} that the others did not; "
                "if the work is legitimate raise timeout_s",
                cause="nccl_timeout",
            )
        return TrainError(
            f"rank {self.rank}: {what} failed: {text.strip().splitlines()[0][:300]}",
            fix="look at every rank's output for the first error",
            cause="nccl_timeout" if "imed out" in text else None,
        )

    def find_late(self, what: str, exc: BaseException) -> TrainError:
        """After a failed collective: ask the control group who is missing, then explain."""
        try:
            self.barrier(what)
        except TrainError as named:
            return named
        except RuntimeError as second:
            return self.late_error(what, second)
        return self.late_error(what, exc)

    def broadcast_object(self, value: Any) -> Any:
        """Rank 0's value on every rank (over the gloo control group)."""
        if not self.distributed:
            return value
        holder = [value if self.rank == 0 else None]
        try:
            dist.broadcast_object_list(holder, src=0, group=self.control)
        except RuntimeError as exc:
            raise self.find_late("the sampler's broadcast", exc) from None
        return holder[0]

    def all_max(self, values: list[int]) -> list[int]:
        """Element-wise maximum over ranks of a few integers (over the control group)."""
        if not self.distributed:
            return values
        tensor = torch.tensor(values, dtype=torch.int64)
        try:
            dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.control)
        except RuntimeError as exc:
            raise self.find_late("an all-reduce of run state", exc) from None
        return [int(v) for v in tensor.tolist()]

    def close(self, failing: bool = False) -> None:
        """Leave dlrig's groups. `failing`: this rank is on its way out with an exception, so
        it does not wait at a barrier for peers that may never come (torchrun tears the job
        down once this process exits)."""
        if self.control is not None and dist.is_initialized() and not failing:
            # Every rank is done before any tears its groups down: gloo aborts a process
            # ("terminate called without an active exception") whose peer closes the
            # sockets under a thread still running.
            with contextlib.suppress(RuntimeError):
                dist.barrier(group=self.control)
            if not self.owns_group:  # the user's default group stays; dlrig's own goes
                with contextlib.suppress(RuntimeError, ValueError):
                    dist.destroy_process_group(self.control)
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self.owns_group = False
        # No reference may outlive the group either: a gloo group still alive when the
        # interpreter finalises aborts the process the same way (6 of 25 two-rank runs of
        # tests/data/train_scripts/slurm_train.py under torchrun with two busy CPU loops beside
        # them; 0 of 25 once this reference was dropped).
        self.control = None


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise InputError(
            f"environment variable {name}={value!r} is not an integer",
            fix="launch with torchrun (or `dlrig train --gpus N`), which sets it",
        ) from None


def init(timeout_s: float) -> World:
    """Join (or create) the process group torchrun describes; one process is not distributed."""
    world_size = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local_rank = _env_int("LOCAL_RANK", 0)
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    world = World(rank, world_size, local_rank, device, timeout_s=timeout_s)
    if dist.is_available() and dist.is_initialized():
        # The user made the group; use it as it is and leave closing it to them.
        world.rank, world.world_size = dist.get_rank(), dist.get_world_size()
        world.backend = str(dist.get_backend())
    elif world_size > 1:
        backend = "nccl" if cuda else "gloo"
        # The DDP wrapper dlrig hands back holds the process group; left to the interpreter's
        # finalisation (a reference cycle), a gloo group aborts the process at exit. A
        # collection at exit, while Python is still whole, frees an unreachable one in time.
        atexit.register(gc.collect)
        dist.init_process_group(
            backend=backend,
            timeout=datetime.timedelta(seconds=timeout_s),
            device_id=device if cuda else None,
        )
        world.backend = backend
        world.owns_group = True
    if world.world_size > 1:
        world.control = dist.new_group(
            backend="gloo", timeout=datetime.timedelta(seconds=timeout_s)
        )
    return world


def wrap_ddp(model: torch.nn.Module, world: World) -> torch.nn.Module:
    """DistributedDataParallel on this rank's device (no device_ids on the CPU)."""
    from torch.nn.parallel import DistributedDataParallel

    if world.device.type == "cuda":
        return DistributedDataParallel(
            model, device_ids=[world.device.index], output_device=world.device.index
        )
    return DistributedDataParallel(model)


def is_fsdp(model: torch.nn.Module) -> bool:
    """FSDP2 (`fully_shard`) or FSDP1: checkpoints must then go through DCP, sharded."""
    import sys

    # A model sharded with FSDP was made by code that imported it; importing it here would
    # cost every other run a second.
    fsdp = sys.modules.get("torch.distributed.fsdp")
    if fsdp is None:
        return False
    FSDPModule, FullyShardedDataParallel = fsdp.FSDPModule, fsdp.FullyShardedDataParallel
    return isinstance(model, FSDPModule | FullyShardedDataParallel) or any(
        isinstance(m, FSDPModule | FullyShardedDataParallel) for m in model.modules()
    )

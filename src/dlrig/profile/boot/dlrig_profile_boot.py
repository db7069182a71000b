"""The profiler driver that runs inside the user's program (standard library and torch only).

A step ends where `optimizer.step()` returns (PyTorch's global optimizer step post-hook), so
any loop that steps an optimizer is profiled without a change: plain PyTorch, Lightning,
Accelerate, the Hugging Face Trainer. Steps, counted from the first optimizer step:

    step 1            never profiled (cold start: allocator, cuDNN autotune, compile)
    step 2 .. wait+1  not recorded; the first of them is counted by FlopCounterMode
    warmup steps      recorded and thrown away (torch.profiler's own warm-up)
    active steps      recorded: the trace

Outside that window the only cost is one Python call per optimizer step.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import tempfile
import threading
from typing import Any

ENV_DIR = "DLRIG_PROFILE_DIR"
ENV_STEPS = "DLRIG_PROFILE_STEPS"
ENV_WAIT = "DLRIG_PROFILE_WAIT"
ENV_WARMUP = "DLRIG_PROFILE_WARMUP"
ENV_FLOPS = "DLRIG_PROFILE_FLOPS"


def rank() -> int | None:
    """This process's rank: torch.distributed's once it is set up (mp.spawn's workers have
    no RANK variable), else the launcher's variables; None when nothing says."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # noqa: BLE001 - a broken process group: the variables still say
        pass
    for name in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        value = os.environ.get(name)
        if value and value.isdigit():
            return int(value)
    return None


def first_recorded_step(wait: int, warmup: int) -> int:
    """The first recorded optimizer step (1-based): after the cold one, `wait` unrecorded and
    `warmup` thrown-away steps."""
    return 1 + wait + warmup + 1


def tag(rank_: int | None) -> str:
    """The files' name part: the rank, or the process id where no rank is known (several
    processes of one command must never write the same file)."""
    return f"rank{rank_}" if rank_ is not None else f"pid{os.getpid()}"


def trace_path(out: str, rank_: int | None) -> str:
    return os.path.join(out, f"trace-{tag(rank_)}.json.gz")


def _profiler_running(torch: Any) -> bool:
    """Whether a torch.profiler (or autograd profiler) is already recording in this process."""
    try:
        return bool(torch._C._autograd._profiler_enabled())
    except AttributeError:
        return bool(getattr(torch.autograd.profiler, "_is_profiler_enabled", False))


def _atomic_json(path: str, document: dict[str, Any]) -> None:
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as stream:
        json.dump(document, stream)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


class Driver:
    """Drives one torch.profiler over the program's steps and writes what it saw to `out`."""

    def __init__(
        self, out: str, steps: int = 5, wait: int = 1, warmup: int = 1, flops: bool = True
    ) -> None:
        self.out = out
        self.steps = steps
        self.wait = max(wait, 1 if flops else 0)
        self.warmup = warmup
        self.count_flops = flops
        self.rank: int | None = None  # known at export (torch.distributed is set up by then)
        self.ended = 0  # optimizer steps that have returned
        self.profiler: Any = None
        self.flop_counter: Any = None
        self.flops: float | None = None
        self.done = False
        self.written: str | None = None
        self.optimizers: dict[str, dict[str, Any]] = {}
        # The step the program was inside when the window was cut short (exit, Session end):
        # recorded but not a whole step, so the analysis leaves it out.
        self.incomplete: str | None = None
        self._finishing = False
        self._handle: Any = None
        self._lock = threading.Lock()

    # -- wiring ---------------------------------------------------------------------------
    def attach(self) -> None:
        """Step on every optimizer step from now on."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        self._handle = register_optimizer_step_post_hook(self._on_optimizer_step)
        atexit.register(self.finish)

    def detach(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def _on_optimizer_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        name = type(optimizer).__name__
        if name not in self.optimizers:
            defaults = getattr(optimizer, "defaults", {}) or {}
            self.optimizers[name] = {
                k: defaults.get(k) for k in ("foreach", "fused") if k in defaults
            }
        self.step()

    # -- the schedule ---------------------------------------------------------------------
    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        if _profiler_running(torch):
            # The program runs its own torch.profiler: one profiler per process, and its own
            # comes first (taking it over would leave the program's trace empty).
            sys.stderr.write(
                "dlrig profile: the program runs torch.profiler itself; not profiling this "
                "process (give its trace to `dlrig profile TRACE`)\n"
            )
            self.done = True
            self.detach()
            return
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(ProfilerActivity.CUDA)  # ROCm builds trace HIP through it
        os.makedirs(self.out, exist_ok=True)
        self.profiler = profile(
            activities=activities,
            schedule=schedule(wait=self.wait, warmup=self.warmup, active=self.steps, repeat=1),
            on_trace_ready=self._export,
            with_flops=True,
        )
        self.profiler.start()

    def step(self) -> None:
        """The end of one training step. Never raises into the program: a profiler that
        fails is reported on stderr once and the program runs on unprofiled."""
        with self._lock:
            if self.done:
                return
            try:
                self._step()
            except Exception as exc:  # noqa: BLE001 - the user's optimizer.step() must not fail
                sys.stderr.write(f"dlrig profile: profiling stopped: {exc}\n")
                self.done = True
                self.detach()

    def _step(self) -> None:
        self.ended += 1
        if self.profiler is None:
            self.start()  # the first step (cold start) is over: profile from here
            if self.count_flops and not self.done:
                self._start_counting()
            return
        if self.flop_counter is not None:
            self._stop_counting()  # the first step after the cold one, unrecorded
        self.profiler.step()
        if self.written is not None:
            self._close()

    def _start_counting(self) -> None:
        try:
            from torch.utils.flop_counter import FlopCounterMode

            self.flop_counter = FlopCounterMode(display=False)
            self.flop_counter.__enter__()
        except Exception as exc:  # noqa: BLE001 - the program runs on without an MFU
            self.flop_counter = None
            self.count_flops = False
            sys.stderr.write(f"dlrig profile: FLOPs not counted: {exc}\n")

    def _stop_counting(self) -> None:
        counter, self.flop_counter = self.flop_counter, None
        try:
            counter.__exit__(None, None, None)
            self.flops = float(counter.get_total_flops())
        except Exception as exc:  # noqa: BLE001 - the program runs on without an MFU
            sys.stderr.write(f"dlrig profile: FLOPs not counted: {exc}\n")
        self.count_flops = False

    def _export(self, profiler: Any) -> None:
        if self._finishing:
            self.incomplete = f"ProfilerStep#{profiler.step_num}"
        self.rank = rank()
        path = trace_path(self.out, self.rank)
        fd, partial = tempfile.mkstemp(dir=self.out, prefix=".trace-", suffix=".json.gz")
        os.close(fd)
        try:
            profiler.export_chrome_trace(partial)
            os.chmod(partial, 0o644)
            os.replace(partial, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
        self.written = path
        self._write_meta()

    def _write_meta(self) -> None:
        import torch

        uuid = None
        if torch.cuda.is_available():
            with contextlib.suppress(Exception):  # older torch: no uuid; the index is used
                uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        _atomic_json(
            os.path.join(self.out, f"meta-{tag(self.rank)}.json"),
            {
                "rank": self.rank,
                "flops_per_step": self.flops,
                "flops_source": "FlopCounterMode" if self.flops is not None else None,
                "optimizers": self.optimizers,
                "torch": torch.__version__,
                "steps_ended": self.ended,
                "incomplete_step": self.incomplete,
                "device_uuid": uuid,
                "cpus": len(os.sched_getaffinity(0))
                if hasattr(os, "sched_getaffinity")
                else os.cpu_count(),
                "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE") or 1),
                "pid": os.getpid(),
            },
        )

    def _close(self) -> None:
        self.done = True
        profiler, self.profiler = self.profiler, None
        if profiler is not None:
            with contextlib.suppress(Exception):  # already stopped by its schedule
                profiler.stop()
        self.detach()

    def finish(self) -> None:
        """At exit, or when a Session ends: write what the window holds, even if the program
        ran fewer steps than asked."""
        with self._lock:
            if self.flop_counter is not None:
                self._stop_counting()
            if self.done or self.profiler is None:
                self.detach()
                return
            self._finishing = True
            self._close()


def arm_from_environment() -> None:
    """Profile this process once it imports torch (sitecustomize calls this)."""
    out = os.environ[ENV_DIR]
    driver = Driver(
        out,
        steps=int(os.environ.get(ENV_STEPS, "5")),
        wait=int(os.environ.get(ENV_WAIT, "1")),
        warmup=int(os.environ.get(ENV_WARMUP, "1")),
        flops=os.environ.get(ENV_FLOPS, "1") == "1",
    )
    if "torch.optim.optimizer" in sys.modules:
        driver.attach()
        return
    sys.meta_path.insert(0, _WhenImported("torch.optim.optimizer", driver.attach))


class _WhenImported:
    """A meta-path finder that runs `then` right after module `name` has loaded, and then
    steps aside: the program's import of torch costs nothing more."""

    def __init__(self, name: str, then: Any) -> None:
        self.name = name
        self.then = then

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != self.name:
            return None
        import importlib.machinery

        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original = loader.exec_module
        then = self.then

        def exec_module(module: Any) -> None:
            original(module)
            try:
                then()
            except Exception as exc:  # noqa: BLE001 - the program runs on unprofiled
                sys.stderr.write(f"dlrig profile: not profiling this process: {exc}\n")

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

"""TensorBoard scalars, GPU readings from the monitor's sampler, and the progress line.

Nothing here runs per step: the run calls `record` only at logging steps, and everything it
reports (samples/s, step time, data-wait time) is a difference of counters the step already
keeps. The loss is read (`.item()`, a device sync) only at those steps. TensorBoard is imported
when a log folder is given, and the GPU sampler is started only where a GPU is (or when a
recorded source is given to replay).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlrig.errors import DlrigError, MissingExtraError
from dlrig.train.log import RunLog, format_seconds


@dataclass
class Window:
    """Counters at the previous logging step."""

    at: float
    step: int = 0
    samples: int = 0
    data_wait_s: float = 0.0
    comm_s: float = 0.0


class Observer:
    def __init__(
        self,
        log: RunLog,
        rank: int,
        log_dir: Path | None,
        gpu_source: Any,
        max_steps: int | None,
        progress: bool,
    ) -> None:
        self.log = log
        self.rank = rank
        self.max_steps = max_steps
        self.progress = progress and rank == 0
        self.writer: Any = None
        self.sampler: Any = None
        self.window = Window(time.perf_counter())
        self.last: dict[str, float] = {}
        if rank == 0 and log_dir is not None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise MissingExtraError("tensorboard", "train", "TensorBoard logging") from None
            self.writer = SummaryWriter(log_dir=str(log_dir))
            log.decide("tensorboard", f"TensorBoard scalars to {log_dir}")
        if rank == 0 and gpu_source is not None:
            from dlrig.monitor import Sampler  # lazy: only with a GPU source (NVML)

            self.sampler = Sampler(gpu_source, interval_seconds=1.0, host=False).start()

    def reset(self, step: int, samples: int, data_wait_s: float, comm_s: float) -> None:
        self.window = Window(time.perf_counter(), step, samples, data_wait_s, comm_s)

    def record(
        self,
        step: int,
        samples: int,
        data_wait_s: float,
        comm_s: float | None,
        loss: Any,
        lr: float | None,
        epoch: int,
    ) -> dict[str, float]:
        now = time.perf_counter()
        w = self.window
        steps = step - w.step
        if steps <= 0:
            return self.last
        elapsed = now - w.at
        values: dict[str, float] = {
            "train/samples_per_s": (samples - w.samples) / elapsed if elapsed > 0 else 0.0,
            "train/step_time_ms": 1e3 * elapsed / steps,
            "train/data_wait_ms": 1e3 * (data_wait_s - w.data_wait_s) / steps,
        }
        if comm_s is not None:
            # Unmeasured communication is left out, not written as 0 ms: a chart of zeros
            # would say the all-reduce was free.
            values["train/comm_ms"] = 1e3 * (comm_s - w.comm_s) / steps
        if loss is not None:
            values["train/loss"] = float(loss.item())
        if lr is not None:
            values["train/lr"] = float(lr)
        values.update(self._gpu_values())
        self.window = Window(now, step, samples, data_wait_s, comm_s or 0.0)
        self.last = values
        if self.writer is not None:
            for name, value in values.items():
                self.writer.add_scalar(name, value, step)
        if self.progress:
            self.log.progress(self._line(step, epoch, values))
        return values

    def _gpu_values(self) -> dict[str, float]:
        if self.sampler is None:
            return {}
        sample = self.sampler.latest()
        if sample is None:
            return {}
        values: dict[str, float] = {}
        for gpu in sample.readable():
            if gpu.utilization_gpu_percent is not None:
                values[f"gpu{gpu.index}/utilization_percent"] = float(gpu.utilization_gpu_percent)
            if gpu.memory_used_bytes is not None:
                values[f"gpu{gpu.index}/memory_used_bytes"] = float(gpu.memory_used_bytes)
        return values

    def _line(self, step: int, epoch: int, values: dict[str, float]) -> str:
        total = f"/{self.max_steps}" if self.max_steps else ""
        parts = [f"step {step}{total}", f"epoch {epoch}"]
        if "train/loss" in values:
            parts.append(f"loss {values['train/loss']:.4f}")
        if "train/lr" in values:
            parts.append(f"lr {values['train/lr']:.3g}")
        parts.append(f"{values['train/samples_per_s']:.0f} samples/s")
        parts.append(f"step {format_seconds(values['train/step_time_ms'] / 1e3)}")
        parts.append(f"data {format_seconds(values['train/data_wait_ms'] / 1e3)}")
        utilisation = [v for k, v in values.items() if k.endswith("utilization_percent")]
        if utilisation:
            parts.append(f"GPU {sum(utilisation) / len(utilisation):.0f}%")
        return "  ".join(parts)

    def close(self) -> None:
        self.log.close_progress()
        if self.writer is not None:
            self.writer.flush()
            self.writer.close()
            self.writer = None
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None


def for_run(options: Any, log: RunLog, rank: int, cuda: bool) -> Observer | None:
    """The run's observer (a `dlrig.train.Options`), or None when nothing is to be observed."""
    progress = options.progress is True or (options.progress == "auto" and log._tty)
    gpu = open_gpu_source(options.gpu_monitor, cuda, log)
    if options.log_dir is None and not progress and gpu is None:
        return None
    log_dir = Path(options.log_dir) if options.log_dir is not None else None
    return Observer(log, rank, log_dir, gpu, options.max_steps, progress)


def open_gpu_source(requested: Any, cuda: bool, log: RunLog) -> Any:
    """The monitor's GPU source: the one given, NVML where CUDA runs, else none."""
    if requested is False or requested is None:
        return None
    if requested != "auto":
        return requested
    if not cuda:
        return None
    try:
        from dlrig import monitor  # lazy: only on a CUDA run that monitors its GPU

        return monitor.open_source()
    except (ImportError, DlrigError) as exc:
        log.decide("gpu_monitor", f"GPU utilisation and memory: not available ({exc})")
        return None

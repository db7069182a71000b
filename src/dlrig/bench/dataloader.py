"""The fastest DataLoader settings for a dataset, found without trying every combination.

A trial iterates the DataLoader for at least two epochs over a fixed subset (so worker start-up
and `persistent_workers` count) and at least `trial_seconds`, and reports samples per second.

The search walks the settings in the order they matter:
1. `num_workers`: 0 (PyTorch's default), then 1, 2, 4, … up to twice the cores, stopping once
   more workers stop paying (≥ 5% better) twice; then the midpoints either side of the best;
2. `prefetch_factor` at that worker count: 2 (the default), 4, then 8 only when 4 helped;
3. `pin_memory` (only with a GPU: pinned batches copy faster and asynchronously).
`persistent_workers=True` is kept whenever there are workers: it never slows a steady epoch and
saves the workers' start-up at every epoch, at the cost of keeping them alive between epochs.

The full grid (every workers × prefetch × persistent × pin combination) is there to check the
search against (`benchmarks/dataloader_search.py`).
"""

from __future__ import annotations

import itertools
import os
import random
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from dlrig.bench.device import torch_module
from dlrig.bench.results import BenchResult, Progress, no_progress
from dlrig.bench.synthetic_images import SyntheticImages
from dlrig.errors import InputError
from dlrig.inputs import call_factory, load_factory

IMPROVES = 1.05


@dataclass(frozen=True)
class LoaderSettings:
    num_workers: int
    prefetch_factor: int | None = None  # None with 0 workers (it must be)
    pin_memory: bool = False
    persistent_workers: bool = False

    def kwargs(self) -> dict[str, Any]:
        found: dict[str, Any] = {"num_workers": self.num_workers, "pin_memory": self.pin_memory}
        if self.num_workers > 0:
            found["prefetch_factor"] = self.prefetch_factor or 2
            found["persistent_workers"] = self.persistent_workers
        return found

    def line(self, batch_size: int, iterable: bool = False) -> str:
        """The DataLoader call to paste (IterableDatasets cannot be shuffled by it)."""
        parts = [f"batch_size={batch_size}"]
        parts += [] if iterable else ["shuffle=True"]
        parts.append(f"num_workers={self.num_workers}")
        if self.num_workers > 0:
            parts += [
                f"prefetch_factor={self.prefetch_factor or 2}",
                f"persistent_workers={self.persistent_workers}",
            ]
        parts.append(f"pin_memory={self.pin_memory}")
        return f"DataLoader(dataset, {', '.join(parts)})"

    def label(self) -> str:
        if self.num_workers == 0:
            return f"workers=0 pin={int(self.pin_memory)}"
        return (
            f"workers={self.num_workers} prefetch={self.prefetch_factor} "
            f"persistent={int(self.persistent_workers)} pin={int(self.pin_memory)}"
        )


@dataclass(frozen=True)
class Trial:
    settings: LoaderSettings
    samples_per_s: float
    seconds: float


@dataclass(frozen=True)
class SearchResult:
    best: Trial
    trials: tuple[Trial, ...]
    seconds: float
    default: Trial | None = None  # num_workers=0, PyTorch's default
    cut_short: bool = False  # the time budget ended the search before it had finished

    def throughput_of(self, settings: LoaderSettings) -> float | None:
        for trial in self.trials:
            if trial.settings == settings:
                return trial.samples_per_s
        return None


# --- datasets ------------------------------------------------------------------------------


def load_dataset(target: str) -> Any:
    """The Dataset a user's `module:factory` returns."""
    factory = load_factory(target, "a torch Dataset", "mypkg.data:make_dataset")
    dataset = call_factory(target, factory)
    torch = torch_module()
    iterable = isinstance(dataset, torch.utils.data.IterableDataset)
    # A str, bytes or dict has __getitem__ and __len__ too, but is data, not a Dataset.
    plain = isinstance(dataset, str | bytes | bytearray | dict)
    if plain or (
        not iterable and not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__"))
    ):
        raise InputError(
            f"{target}: the factory returned {type(dataset).__name__}, not a Dataset",
            fix="return a torch.utils.data.Dataset (with __len__ and __getitem__)",
        )
    if not iterable and len(dataset) == 0:
        raise InputError(f"{target}: the dataset is empty", fix="return a dataset with samples")
    return dataset


# --- trials ----------------------------------------------------------------------------------


@dataclass
class TrialRunner:
    dataset: Any
    batch_size: int
    batches_per_epoch: int = 10
    trial_seconds: float = 1.5
    device: str | None = None  # "cuda:0" to copy batches there (pin_memory matters then)
    label: str = "dataset"
    # With a budget (--quick) a trial ends here even mid-epoch: on many cores an epoch is
    # 4 batches per worker of the most workers tried, minutes of reading at default settings.
    limit_s: float | None = None
    _subset: Any = field(default=None, init=False)
    _epoch_length: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        torch = torch_module()
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 8
        self._epoch_length = max(self.batches_per_epoch, 4 * max(worker_counts(cores)))
        if self.device is not None:
            # Create the CUDA context now, not inside the first (default-settings) trial.
            torch.zeros(1, device=self.device)
            torch.cuda.synchronize(self.device)
        if isinstance(self.dataset, torch.utils.data.IterableDataset):
            self._subset = self.dataset
            return
        wanted = min(len(self.dataset), self._epoch_length * self.batch_size)
        indices = random.Random(0).sample(range(len(self.dataset)), wanted)
        self._subset = torch.utils.data.Subset(self.dataset, indices)

    def epoch_batches(self, settings: LoaderSettings) -> int:
        """Batches per epoch, the same for every trial (so start-up costs weigh alike): enough
        for the most workers tried to have several batches each, or a short epoch would cap
        the useful number of workers at its length."""
        return self._epoch_length

    def _batches(self, loader: Any, count: int) -> Iterator[Any]:
        return itertools.islice(iter(loader), count)

    def _epochs(self, loader: Any, count: int) -> int:
        """Samples read in two epochs or more, until `trial_seconds` have passed."""
        samples = 0
        epochs = 0
        started = time.perf_counter()
        while epochs < 2 or time.perf_counter() - started < self.trial_seconds:
            for batch in self._batches(loader, count):
                samples += _batch_size(batch)
                if self.device is not None:
                    _to_device(batch, self.device)
                if self.limit_s is not None and time.perf_counter() - started > self.limit_s:
                    return samples
            epochs += 1
            if samples == 0:
                raise InputError(
                    f"{self.label}: the DataLoader gave no batches",
                    fix="check the dataset's length and batch size",
                )
        return samples

    def run(self, settings: LoaderSettings) -> Trial:
        with warnings.catch_warnings():
            # Oversubscribing the cores is one of the settings being measured.
            warnings.filterwarnings("ignore", message="This DataLoader will create")
            return self._run(settings)

    def _run(self, settings: LoaderSettings) -> Trial:
        torch = torch_module()
        iterable = isinstance(self._subset, torch.utils.data.IterableDataset)
        loader = torch.utils.data.DataLoader(
            self._subset,
            batch_size=self.batch_size,
            shuffle=not iterable,
            drop_last=False,
            **settings.kwargs(),
        )
        started = time.perf_counter()
        try:
            samples = self._epochs(loader, self.epoch_batches(settings))
            if self.device is not None:
                torch.cuda.synchronize(self.device)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's dataset: report what it raised
            text = str(exc).strip().splitlines()
            detail = next((line for line in reversed(text) if line.strip()), type(exc).__name__)
            raise InputError(
                f"{self.label}: reading a batch failed ({type(exc).__name__}: {detail[:200]})",
                fix="call dataset[0] yourself to see the traceback, then fix the dataset",
            ) from None
        finally:
            # Shut persistent workers down now, not when the loader is collected.
            iterator = getattr(loader, "_iterator", None)
            if iterator is not None and hasattr(iterator, "_shutdown_workers"):
                iterator._shutdown_workers()
        seconds = time.perf_counter() - started
        return Trial(settings, samples / seconds, seconds)


def _batch_size(batch: Any) -> int:
    torch = torch_module()
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    if isinstance(batch, list | tuple) and batch:
        return _batch_size(batch[0])
    if isinstance(batch, dict) and batch:
        return _batch_size(next(iter(batch.values())))
    return 1


def _to_device(batch: Any, device: str) -> None:
    torch = torch_module()
    if isinstance(batch, torch.Tensor):
        batch.to(device, non_blocking=True)
    elif isinstance(batch, list | tuple):
        for item in batch:
            _to_device(item, device)
    elif isinstance(batch, dict):
        for item in batch.values():
            _to_device(item, device)


# --- search and grid ---------------------------------------------------------------------------


def worker_counts(cores: int) -> list[int]:
    """1, 2, 4, … up to twice the cores (decoding waits on I/O too), and the cores themselves."""
    counts = []
    n = 1
    while n <= 2 * cores:
        counts.append(n)
        n *= 2
    if cores not in counts:
        counts.append(cores)
    return sorted(counts)


class _OutOfTime(Exception):
    """The next trial would go past the search's budget."""


def search(
    runner: TrialRunner,
    cores: int,
    cuda: bool,
    progress: Progress = no_progress,
    budget_seconds: float | None = None,
) -> SearchResult:
    """The default settings, then workers, prefetch and pinning in turn. With `budget_seconds`
    a trial starts only if one as long as the longest so far still fits; the best found by
    then is the answer, and it says it was cut short."""
    started = time.perf_counter()
    done: dict[LoaderSettings, Trial] = {}

    def trial(settings: LoaderSettings) -> Trial:
        if settings not in done:
            if budget_seconds is not None and done:
                longest = max(t.seconds for t in done.values())
                if time.perf_counter() - started + longest > budget_seconds:
                    raise _OutOfTime
            progress(f"dataloader: {settings.label()}", min(len(done) / 10, 0.95))
            done[settings] = runner.run(settings)
        return done[settings]

    default = trial(LoaderSettings(0, None, False, False))
    try:
        best = _improve(trial, default, cores, cuda)
        cut_short = False
    except _OutOfTime:
        best = max(done.values(), key=lambda t: t.samples_per_s)
        cut_short = True
    seconds = time.perf_counter() - started
    return SearchResult(best, tuple(done.values()), seconds, default, cut_short)


def _improve(
    trial: Callable[[LoaderSettings], Trial], default: Trial, cores: int, cuda: bool
) -> Trial:

    pin = False
    best = default
    counts = worker_counts(cores)
    stalls = 0
    for workers in counts:
        candidate = trial(LoaderSettings(workers, 2, pin, True))
        if candidate.samples_per_s >= best.samples_per_s * IMPROVES:
            best, stalls = candidate, 0
        else:
            if candidate.samples_per_s > best.samples_per_s:
                best = candidate
            stalls += 1
            if stalls >= 2:
                break
    # Midpoints either side of the best count (powers of two step coarsely at high counts).
    if best.settings.num_workers >= 4:
        w = best.settings.num_workers
        for middle in (w * 3 // 4, w * 3 // 2):
            if middle <= 2 * cores and middle not in counts:
                candidate = trial(LoaderSettings(middle, 2, pin, True))
                if candidate.samples_per_s > best.samples_per_s:
                    best = candidate
    if best.settings.num_workers > 0:
        workers = best.settings.num_workers
        four = trial(LoaderSettings(workers, 4, pin, True))
        helped = four.samples_per_s >= best.samples_per_s * IMPROVES
        if four.samples_per_s > best.samples_per_s:
            best = four
        if helped:
            eight = trial(LoaderSettings(workers, 8, pin, True))
            if eight.samples_per_s > best.samples_per_s:
                best = eight
    if cuda:
        pinned = trial(
            LoaderSettings(
                best.settings.num_workers,
                best.settings.prefetch_factor,
                True,
                best.settings.persistent_workers,
            )
        )
        if pinned.samples_per_s > best.samples_per_s:
            best = pinned
    return best


def grid(
    runner: TrialRunner, cores: int, cuda: bool, progress: Progress = no_progress
) -> SearchResult:
    started = time.perf_counter()
    settings = []
    for pin in (False, True) if cuda else (False,):
        settings.append(LoaderSettings(0, None, pin, False))
        for workers in worker_counts(cores):
            for prefetch in (2, 4, 8):
                for persistent in (False, True):
                    settings.append(LoaderSettings(workers, prefetch, pin, persistent))
    trials = []
    for i, s in enumerate(settings):
        progress(f"dataloader grid: {s.label()}", i / len(settings))
        trials.append(runner.run(s))
    best = max(trials, key=lambda t: t.samples_per_s)
    return SearchResult(best, tuple(trials), time.perf_counter() - started, trials[0])


def run(
    target: str | None = None,
    batch_size: int = 64,
    cuda_device: str | None = None,
    trial_seconds: float = 1.5,
    batches_per_epoch: int = 10,
    progress: Progress = no_progress,
    budget_seconds: float | None = None,
) -> tuple[list[BenchResult], SearchResult]:
    if batch_size < 1:
        raise InputError(f"--batch-size {batch_size} is not positive", fix="give a batch size >= 1")
    dataset = load_dataset(target) if target else SyntheticImages()
    iterable = isinstance(dataset, torch_module().utils.data.IterableDataset)
    label = target or "synthetic ImageNet-like images (JPEG decode + crop + flip)"
    runner = TrialRunner(
        dataset,
        batch_size,
        batches_per_epoch,
        trial_seconds,
        cuda_device,
        label=target or "synthetic",
        # About five trials fit: the default, three worker counts, one prefetch.
        limit_s=None if budget_seconds is None else budget_seconds / 5,
    )
    cores = (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    )
    found = search(runner, cores, cuda_device is not None, progress, budget_seconds)
    best = found.best
    default = found.default
    speedup = best.samples_per_s / default.samples_per_s if default else None
    results = [
        BenchResult.of(
            "dataloader",
            "best_settings",
            round(best.samples_per_s, 1),
            "samples/s",
            verdict="info",
            fix=best.settings.line(batch_size, iterable),
            note=f"{label}; batch {batch_size}; {len(found.trials)} trials in "
            f"{found.seconds:.0f} s; {cores} CPU cores"
            + (f"; {speedup:.1f}x the default num_workers=0" if speedup else "")
            + (
                f"; the search stopped at its {budget_seconds:g} s budget (--quick): a longer "
                "run may find better settings"
                if found.cut_short
                else ""
            ),
            detail={
                "settings": best.settings.kwargs(),
                "trials": [
                    {"settings": t.settings.kwargs(), "samples_per_s": round(t.samples_per_s, 1)}
                    for t in found.trials
                ],
            },
        )
    ]
    if default is not None:
        low = speedup is not None and speedup >= 1.5
        results.append(
            BenchResult.of(
                "dataloader",
                "default_settings",
                round(default.samples_per_s, 1),
                "samples/s",
                round(best.samples_per_s, 1),
                "low" if low else "ok",
                best.settings.line(batch_size, iterable) if low else None,
                "DataLoader(dataset, batch_size, shuffle=True): PyTorch's defaults, loading in "
                "the training process; expected = the best settings found",
                "input_pipeline_bound" if low else None,
            )
        )
    progress("dataloader", 1.0)
    return results, found

"""A run's checkpoints: what goes in (via `state`), where (via `checkpoint`), and resuming.

`load_latest` reads the newest committed checkpoint; `apply_training` puts the training objects
back; the loader restores the data position and the generators at the start of its first epoch
(see `TrainLoader.restore`); `save` writes one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dlrig.train import checkpoint as ckpt
from dlrig.train import rng, state
from dlrig.train.data import TrainLoader
from dlrig.train.precision import TrainError

if TYPE_CHECKING:
    from dlrig.train.run import Run


def load_latest(run: Run) -> None:
    """Read the newest committed checkpoint, if any (applied by `apply_training` and the loader)."""
    assert run.options.checkpoint_dir is not None
    directory = Path(run.options.checkpoint_dir)
    found = ckpt.find_latest(directory)
    if found is None:
        return
    checkpointer = run.checkpointer or ckpt.Checkpointer(
        directory, run.options.keep_checkpoints, run.world, run.sharded
    )
    shared, mine, manifest = checkpointer.load(found)
    run.resume_state = (shared, mine, found)
    counters = shared["counters"]
    run.log.say(
        f"resuming from {found} (step {counters['step']}, saved by "
        f"{manifest.get('world_size', 1)} rank(s))"
    )


def apply_training(run: Run) -> None:
    """Put the model, optimizer, scheduler, scaler and counters back."""
    assert run.resume_state is not None and run.engine is not None and run.module is not None
    shared, mine, path = run.resume_state
    if shared.get("model") is not None:
        run.module.load_state_dict(shared["model"])
        if run.optimizer is not None and shared.get("optimizer") is not None:
            run.optimizer.load_state_dict(shared["optimizer"])
    elif (path / "dcp").is_dir():
        sharded = state.sharded_state(run.module, run.optimizer)
        ckpt.load_sharded(path, sharded)
        state.apply_sharded(run.module, run.optimizer, sharded)
    if run.scheduler is not None and shared.get("scheduler") is not None:
        run.scheduler.load_state_dict(shared["scheduler"])
    if run.engine.scaler is not None and shared.get("scaler"):
        run.engine.scaler.load_state_dict(shared["scaler"])
    counters = shared["counters"]
    run.steps = int(counters["step"])
    run.timing.samples = int(counters.get("samples", 0))
    run.timing.resumed_step, run.timing.resumed_samples = run.steps, run.timing.samples
    # The run's state is already in this checkpoint: `finish` before any step needs no other.
    run.last_checkpoint = path
    if mine is not None and run.loader is None:
        # No loader of ours: put the generators back now (a loader would do it at the
        # right moment of its first epoch instead).
        rng.restore(mine["rng"])


def apply_data(run: Run, loader: TrainLoader) -> None:
    """Put the loader at the saved data position (it restores the generators itself)."""
    assert run.resume_state is not None
    shared, mine, _path = run.resume_state
    data = state.combined_data(shared, mine)
    if data is not None:
        where = loader.restore(data, (mine or {}).get("rng"))
        run.log.say(f"data resumes at {where}")


def save(run: Run) -> Path:
    """Write a checkpoint of this step (every rank calls it)."""
    if run.checkpointer is None or run.engine is None:
        raise TrainError("Run.save without checkpoint_dir", fix="give Run(checkpoint_dir=...)")
    engine = run.engine
    shared_data, mine_data = state.data_state(run.loader)
    counters = {
        "step": run.steps,
        "samples": run.timing.samples,
        "plan": engine.plan.to_dict() if engine.plan is not None else {},
    }
    generators = run.loader.generators if run.loader is not None else {}
    sharded = (
        state.sharded_state(run.module, run.optimizer)
        if run.sharded and run.module is not None
        else None
    )
    shared = (
        state.shared_payload(
            None if run.sharded else run.module,
            run.optimizer,
            run.scheduler,
            engine.scaler,
            counters,
            shared_data,
        )
        if run.world.rank == 0
        else None
    )
    saved = run.checkpointer.save(
        run.steps, shared, state.rank_payload(generators, mine_data), sharded
    )
    run.last_checkpoint = saved.path
    run.log.say(f"checkpoint of step {run.steps} in {saved.path} ({saved.seconds:.2f} s)")
    return saved.path

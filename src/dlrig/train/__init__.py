"""`dlrig.train`: mixed precision, accumulation, DDP, OOM back-off, checkpoints and TensorBoard
in a training loop that stays the user's.

    from dlrig import train
    run = train.Run(precision="bf16", global_batch=256, micro_batch=32,
                    checkpoint_dir="ckpt", checkpoint_every_steps=500, log_dir="runs/a")
    model, optimizer = run.setup(model, optimizer, scheduler)
    loader = run.setup_dataloader(loader)
    for epoch in run.epochs(10):
        for x, y in loader:
            loss = run.step(lambda x, y: F.cross_entropy(model(x), y), x, y)
    run.finish()

Importing this module imports torch and nothing heavier: TensorBoard is imported when a log
folder is given, `dlrig.fit` only by `micro_batch_from_fit`.
"""

from __future__ import annotations

from dlrig.train.accumulation import BatchPlan
from dlrig.train.backoff import OomInjector, micro_batch_from_fit
from dlrig.train.options import Options
from dlrig.train.precision import TrainError
from dlrig.train.run import Run
from dlrig.train.summary import Summary

__all__ = [
    "BatchPlan",
    "OomInjector",
    "Options",
    "Run",
    "Summary",
    "TrainError",
    "micro_batch_from_fit",
]

"""A user's training script: shuffled data, dropout, Adam and a scheduler, checkpointed.

Everything random is in it on purpose (shuffle order, dropout masks, a NumPy draw, Python's
random) so that a resume that missed any generator or the data position shows as different
final weights. Prints `step N` after each step for the test that stops it; with `--hold-at N`
it then waits (up to a minute) for a stop signal before the next step, so the signal lands at a
known step however slowly the machine runs: the checkpoint of a signal is of step N + 1.
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from dlrig import train


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint-dir", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--every", type=int, default=4)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sigterm", action="store_true")
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--micro-batch", type=int, default=None)
    parser.add_argument("--hold-at", type=int, default=None)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    data = TensorDataset(torch.randn(44, 6), torch.randint(0, 3, (44,)))
    loader = DataLoader(data, batch_size=4, shuffle=True)  # 11 batches: epochs end mid-run
    model = torch.nn.Sequential(
        torch.nn.Linear(6, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 3)
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.7)
    run = train.Run(
        checkpoint_dir=args.checkpoint_dir,
        checkpoint_every_steps=args.every,
        keep_checkpoints=2,
        max_steps=args.steps,
        save_on_sigterm=args.sigterm,
        micro_batch=args.micro_batch,
        quiet=True,
    )
    model, optimizer = run.setup(model, optimizer, scheduler)
    loader = run.setup_dataloader(loader)

    def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # Randomness outside torch too: a NumPy and a Python draw feed the loss.
        noise = float(np.random.uniform(0.0, 0.01)) + random.uniform(0.0, 0.01)
        return F.cross_entropy(model(x), y) * (1.0 + noise)

    for _epoch in run.epochs(1000):
        for x, y in loader:
            run.step(loss_fn, x, y)
            print(f"step {run.steps}", flush=True)
            if args.sleep:
                time.sleep(args.sleep)
            if run.steps == args.hold_at:
                deadline = time.monotonic() + 60
                while run.stop_signal is None and time.monotonic() < deadline:
                    time.sleep(0.01)  # a SIGKILL ends it here; a stop signal, after one step
    run.finish()
    torch.save({k: v.clone() for k, v in model.state_dict().items()}, args.out)
    print("done", flush=True)


if __name__ == "__main__":
    sys.exit(main())

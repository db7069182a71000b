"""A dlrig.train DDP script for the Slurm test: each rank prints where it ran and its weights.

Started by the sbatch `dlrig provision launch --scheduler slurm` writes (srun -> torchrun), one
gloo rank per node. Sequential data, SGD: the final weights must equal one process's on the
whole batch (`--reference`).
"""

from __future__ import annotations

import argparse
import socket

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from dlrig import train

STEPS = 6


def data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(
        torch.randn(96, 5, generator=generator), torch.randint(0, 3, (96,), generator=generator)
    )


def model() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Linear(5, 3)


def reference() -> torch.nn.Module:
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.5)
    x, y = data().tensors
    for step in range(STEPS):
        F.cross_entropy(
            net(x[16 * step : 16 * step + 16]), y[16 * step : 16 * step + 16]
        ).backward()
        optimizer.step()
        optimizer.zero_grad()
    return net


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.reference:
        net = reference()
    else:
        net = model()
        run = train.Run(global_batch=16, micro_batch=4, max_steps=STEPS, timeout_s=60)
        wrapped, _optimizer = run.setup(net, torch.optim.SGD(net.parameters(), lr=0.5))
        loader = run.setup_dataloader(DataLoader(data(), batch_size=8))
        for x, y in loader:
            run.step(lambda a, b: F.cross_entropy(wrapped(a), b), x, y)
        summary = run.finish()
        print(
            f"rank={run.rank} world={run.world_size} node={socket.gethostname()} "
            f"steps={summary.steps} accumulation={summary.plan['accumulation']}",
            flush=True,
        )
    print(f"weights={weights_text(net)}", flush=True)


def weights_text(net: torch.nn.Module) -> str:
    return ",".join(
        f"{v:.6f}" for v in torch.cat([p.detach().flatten() for p in net.parameters()]).tolist()
    )


if __name__ == "__main__":
    main()

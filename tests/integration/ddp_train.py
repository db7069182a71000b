"""A tiny deterministic DDP training run on gloo (CPU): prints the final loss.

Every rank builds the same data; each takes its own half of every batch (DistributedSampler
without shuffling), and DDP averages the gradients, so N ranks must end with the loss one
process gets on the full batch (`--reference`). Used by the Slurm and torchrun tests.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

STEPS = 30


def data() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=generator)
    w = torch.arange(1.0, 9.0).unsqueeze(1)
    return x, x @ w + 0.01 * torch.randn(64, 1, generator=generator)


def model() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Linear(8, 1)


def loss_on(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(net(x), y)


def reference() -> float:
    x, y = data()
    net = model()
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for _ in range(STEPS):
        opt.zero_grad()
        loss_on(net, x, y).backward()
        opt.step()
    return float(loss_on(net, x, y).detach())


def distributed() -> float:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = data()
    shard = slice(rank * len(x) // world, (rank + 1) * len(x) // world)
    net = torch.nn.parallel.DistributedDataParallel(model())
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    for _ in range(STEPS):
        opt.zero_grad()
        loss_on(net, x[shard], y[shard]).backward()
        opt.step()
    final = float(loss_on(net.module, x, y).detach())
    print(
        f"rank={rank} world={world} node={os.environ.get('SLURMD_NODENAME', '-')} "
        f"final_loss={final:.6f}",
        flush=True,
    )
    dist.destroy_process_group()
    return final


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", action="store_true")
    args = parser.parse_args()
    if args.reference:
        print(f"final_loss={reference():.6f}")
    else:
        distributed()

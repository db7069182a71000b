"""Two DDP processes started with torch.multiprocessing.spawn (gloo, CPU), the rank passed to
init_process_group and no RANK variable: `dlrig profile -- python profile_spawn.py` must
write one trace per rank, and never fail the job."""

import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def worker(rank: int, world: int, port: int, steps: int) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    torch.manual_seed(rank)
    model = nn.parallel.DistributedDataParallel(nn.Linear(32, 32))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(steps):
        model(torch.randn(16, 32)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    assert not os.environ.get("RANK")  # the rank comes from init_process_group only
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(worker, args=(2, port, steps), nprocs=2, join=True)
    print("both ranks done")


if __name__ == "__main__":
    main()

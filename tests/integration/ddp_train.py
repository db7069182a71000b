"""A tiny deterministic DDP training run on gloo (CPU): prints the final loss.

Every rank builds the same data; each takes its own half of every batch (DistributedSampler
without shuffling), and DDP averages the gradients, so N ranks must end with the loss one
process gets on the full batch (`--reference`). Used by the Slurm and torchrun tests.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import subprocess

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
    # Every rank finishes its collectives before any tears the group down: a gloo peer closing
    # its sockets under another's running thread aborted a finished rank ("terminate called
    # without an active exception", seen in a fresh-clone CI run; mosaicml/streaming#186 does
    # the same).
    dist.barrier()
    # And nothing may hold the group past destroy: DDP's reducer keeps it alive, and a gloo
    # group finalised with the interpreter aborts the process the same way (seen once in 2
    # fresh-clone runs after the barrier was added). Collected now, while Python is whole.
    del net, opt
    gc.collect()
    dist.destroy_process_group()
    return final


def report_step() -> None:
    """What slurmctld records for the srun step this process runs in (`scontrol show step`):
    the CPUs per task the step asked for (TresPerTask; absent when srun was given none, and
    then a task/affinity or cgroup plugin binds each task to 1 CPU) and the step's total."""
    step = f"{os.environ['SLURM_JOB_ID']}.{os.environ['SLURM_STEP_ID']}"
    shown = subprocess.run(
        ["scontrol", "show", "step", step], capture_output=True, text=True, timeout=30
    ).stdout
    per_task = re.search(r"TresPerTask=\S*?cpu[:=](\d+)", shown)
    per_step = re.search(r"TresPerStep=\S*?cpu[:=](\d+)", shown)
    print(
        f"step={step} node={os.environ.get('SLURMD_NODENAME', '-')} "
        f"cpus_per_task={per_task.group(1) if per_task else 'unset'} "
        f"step_cpus={per_step.group(1) if per_step else '?'}",
        flush=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--report-step", action="store_true")
    args = parser.parse_args()
    if args.reference:
        print(f"final_loss={reference():.6f}")
    else:
        if args.report_step:
            report_step()
        distributed()

"""Run under torchrun with 2 gloo processes; each scenario writes what its rank saw to OUT.

1. accumulation: 2 ranks × 4 micro-steps × 2 samples, SGD; final weights and the number of
   gradient all-reduces (no_sync must hold back all but the last micro-step's).
2. weighted: a user's WeightedRandomSampler (own generator); the indices each rank got.
3. oom: OOM injected on rank 1 at step 2; the plan after it and the final weights.
4. fsdp: FSDP2 + DCP checkpoint, resumed by a second Run; the final local shards.

The process group is the script's own (dlrig uses it and leaves it open).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

from dlrig import train


def data() -> TensorDataset:
    generator = torch.Generator().manual_seed(1)
    return TensorDataset(
        torch.randn(64, 6, generator=generator), torch.randint(0, 3, (64,), generator=generator)
    )


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def sgd_run(out: Path, name: str, **options: object) -> dict[str, object]:
    net = model()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    run = train.Run(quiet=False, **options)  # type: ignore[arg-type]
    wrapped, optimizer = run.setup(net, optimizer)
    loader = run.setup_dataloader(DataLoader(data(), batch_size=8))
    samples_per_step = []
    for x, y in loader:
        before = run.timing.samples
        run.step(lambda a, b: F.cross_entropy(wrapped(a), b), x, y)
        samples_per_step.append(run.timing.samples - before)
        if run.steps == 3:
            break
    summary = run.finish()
    timer = run.engine.comm_timer if run.engine else None
    if run.rank == 0:
        torch.save(net.state_dict(), out / f"{name}.pt")
    return {
        "allreduce_launches": timer.launches if timer else None,
        "plan": summary.plan,
        "decisions": [d.text for d in summary.decisions],
        "samples_per_step": samples_per_step,
        "weights_sum": float(sum(p.detach().double().sum() for p in net.parameters())),
        "steps": summary.steps,
    }


def weighted(out: Path) -> dict[str, object]:
    dataset = TensorDataset(torch.arange(40))
    weights = torch.zeros(40)
    weights[[3, 7, 11, 20]] = torch.tensor([1.0, 2.0, 4.0, 8.0])
    sampler = WeightedRandomSampler(
        weights, num_samples=30, replacement=True, generator=torch.Generator().manual_seed(7)
    )
    run = train.Run(quiet=False)
    net = torch.nn.Linear(1, 1)
    run.setup(net, torch.optim.SGD(net.parameters(), lr=0.0))
    loader = run.setup_dataloader(DataLoader(dataset, batch_size=3, sampler=sampler))
    seen: list[list[int]] = []
    for _epoch in run.epochs(2):
        batches = []
        for (index,) in loader:
            batches.append(index.tolist())
            run.step(lambda i: net(i.float()[:, None]).sum() * 0.0, index)
        seen.append(batches)
    summary = run.finish()
    return {"epochs": seen, "decisions": [d.text for d in summary.decisions]}


def fsdp(out: Path) -> dict[str, object]:
    from torch.distributed.fsdp import fully_shard

    def build() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        net = model()
        for layer in net:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(net)
        return net, torch.optim.Adam(net.parameters(), lr=1e-2)

    def go(steps: int, checkpoint_dir: str | None) -> torch.nn.Module:
        net, optimizer = build()
        run = train.Run(
            quiet=True,
            max_steps=steps,
            checkpoint_dir=checkpoint_dir,
            checkpoint_every_steps=2 if checkpoint_dir else None,
        )
        net, optimizer = run.setup(net, optimizer)
        loader = run.setup_dataloader(DataLoader(data(), batch_size=4, shuffle=True))
        for _epoch in run.epochs(100):
            for x, y in loader:
                run.step(lambda a, b: F.cross_entropy(net(a), b), x, y)
        run.finish()
        return net

    straight = go(6, None)
    checkpoint_dir = str(out / "fsdp-ckpt")
    go(3, checkpoint_dir)
    files = sorted(os.listdir(Path(checkpoint_dir) / "step-00000003" / "dcp"))
    resumed = go(6, checkpoint_dir)
    same = all(
        torch.equal(a.to_local(), b.to_local())
        for a, b in zip(straight.parameters(), resumed.parameters(), strict=True)
    )
    return {"resumed_equal": same, "dcp_files": files}


def main() -> None:
    out = Path(sys.argv[1])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    results: dict[str, object] = {
        "accumulation": sgd_run(
            out, "accumulation", global_batch=16, micro_batch=2, measure_comm=True
        ),
        "weighted": weighted(out),
        "oom": sgd_run(
            out,
            "oom",
            global_batch=16,
            micro_batch=8,
            oom_backoff=True,
            inject_oom=train.OomInjector(rank=1, step=2, above_micro_batch=4),
        ),
        "fsdp": fsdp(out),
    }
    (out / f"rank{rank}.json").write_text(json.dumps(results, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

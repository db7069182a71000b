"""The smallest dlrig.train script: a few steps, then exit with the code given (default 0)."""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from dlrig import train

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--exit", type=int, default=0)
parser.add_argument("--json", action="store_true", help="the script's own --json (after --)")
args = parser.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
net = torch.nn.Linear(4, 2)
run = train.Run(max_steps=args.steps)
model, optimizer = run.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
data = TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,)))
loader = run.setup_dataloader(DataLoader(data, batch_size=8, shuffle=True))
for _epoch in run.epochs(10):
    for x, y in loader:
        run.step(lambda a, b: F.cross_entropy(model(a), b), x, y)
run.finish()
print(f"script stdout: json={args.json} rank={run.rank}")
sys.exit(args.exit)

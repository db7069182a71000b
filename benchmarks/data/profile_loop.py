"""A CPU training loop for benchmarks/profile_speed.py: a small MLP on random batches, each
step timed; the times go to the JSON file named by PROFILE_LOOP_TIMES."""

import json
import os
import sys
import time

import torch
from torch import nn

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 80
torch.manual_seed(0)
torch.set_num_threads(1)
model = nn.Sequential(
    nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randn(256, 512)
y = torch.randint(0, 10, (256,))
times = []
for _ in range(steps):
    start = time.perf_counter()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    times.append(time.perf_counter() - start)
with open(os.environ["PROFILE_LOOP_TIMES"], "w") as stream:
    json.dump(times, stream)

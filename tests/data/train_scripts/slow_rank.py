"""Under torchrun, 2 processes: rank 1 stalls before step 3 for longer than the timeout.

dlrig.train must turn the stalled gradient all-reduce into an error that names rank 1 on rank 0,
within seconds of the timeout, instead of a hang.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from dlrig import train

torch.set_num_threads(1)
run = train.Run(timeout_s=2)
torch.manual_seed(0)
net = torch.nn.Linear(4, 2)
model, optimizer = run.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
loader = run.setup_dataloader(
    DataLoader(TensorDataset(torch.randn(40, 4), torch.randint(0, 2, (40,))), batch_size=4)
)
for x, y in loader:
    if run.rank == 1 and run.steps == 2:
        time.sleep(5)
    run.step(lambda a, b: F.cross_entropy(model(a), b), x, y)
run.finish()

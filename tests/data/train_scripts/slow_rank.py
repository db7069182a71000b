"""Under torchrun, 2 processes: rank 1 stalls before step 3 for a minute, 30 times the timeout.

dlrig.train must turn the stalled gradient all-reduce into an error that names rank 1 on rank 0,
within seconds of the timeout, instead of a hang: rank 0 fails, torchrun stops rank 1, and
rank 1 never gets to say it woke up.

The timeout (2 s) is short, so the ranks first meet without one (files in the folder given):
on a busy machine one rank may finish importing torch seconds after the other, and the
process group must not time out before the stall it is here to show.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from dlrig import train

meeting = Path(sys.argv[1])
(meeting / f"rank{os.environ['RANK']}").touch()
deadline = time.monotonic() + 120
while len(list(meeting.glob("rank*"))) < int(os.environ["WORLD_SIZE"]):
    if time.monotonic() > deadline:
        sys.exit("the other rank never started")
    time.sleep(0.01)

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
        time.sleep(60)
        print("rank 1 woke up from its stall", file=sys.stderr, flush=True)
    run.step(lambda a, b: F.cross_entropy(model(a), b), x, y)
run.finish()

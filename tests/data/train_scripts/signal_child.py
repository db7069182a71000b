"""A command for `dlrig train` that counts the stop signals it gets (no torch: it starts fast).

Prints `ready PID`, waits for a stop signal, then a second more for any copy of it, writes
the names of the signals it got to OUT and exits with 128 + the first one's number, or with
`--exit-code` when given (torchrun exits with 1 after a signal).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--exit-code", type=int, default=None)
args = parser.parse_args()
got: list[int] = []


def on_signal(signum: int, frame: object) -> None:
    got.append(signum)


for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(stop, on_signal)
print(f"ready {os.getpid()}", flush=True)
deadline = time.monotonic() + 120
while not got and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(1.0)  # a second copy (from dlrig) would come within this
with open(args.out, "w") as stream:
    stream.write(" ".join(signal.Signals(s).name for s in got) + "\n")
sys.exit(args.exit_code if args.exit_code is not None else 128 + got[0] if got else 0)

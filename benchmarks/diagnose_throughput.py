"""Throughput and peak memory of `dlrig diagnose` against `grep -c -E` on a realistic large log.

Generates a training log (default 1 GB: progress bars with carriage returns, rank-prefixed
lines, HF-Trainer dicts, NCCL INFO chatter, warnings, ANSI colours, and at the end one rank's
CUDA OOM followed by the other ranks' NCCL watchdog timeouts), then times, in one run:

- `dlrig diagnose --json FILE` (wall time, peak RSS of the process, the cause it names);
- `grep -c -i -E -e P1 -e P2 ...` with the same signatures' patterns (translated to ERE).

    python benchmarks/diagnose_throughput.py [--size-mb 1024] [--keep]

Each is run --repeats times (3), interleaved, and the medians are compared.

Targets: dlrig throughput >= 3.0 x grep's (issue 23; issue 9 asked for 1.0 x); peak RSS < 150
MB. The anchor scan uses Hyperscan where the `fast` extra installed it (`engine=` in the last
line), RE2 otherwise. The last line is a key=value summary.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _block(rng: random.Random, step: int) -> str:
    """About 64 KB of ordinary training output."""
    lines = []
    while sum(len(line) for line in lines) < 64 * 1024:
        kind = rng.random()
        step += 1
        rank = rng.randrange(8)
        if kind < 0.30:
            bars = "".join(
                f"\r{p:3d}%|{'█' * (p // 10):<10}| {step + p}/{100000} [12:{p:02d}<31:02, 2.{p:02d}it/s]"
                for p in range(0, 100, 9)
            )
            lines.append(f"Epoch 3: {bars}")
        elif kind < 0.55:
            lines.append(
                f"[rank{rank}]:{{'loss': {rng.uniform(0.5, 3):.4f}, 'grad_norm': {rng.uniform(0.1, 9):.4f}, "
                f"'learning_rate': {rng.uniform(1e-5, 3e-4):.3e}, 'epoch': {step / 5000:.2f}}}"
            )
        elif kind < 0.75:
            lines.append(
                f"node-{rank // 4}:{4000 + rank}:{4100 + rank} [{rank}] NCCL INFO Channel {step % 32:02d}/0 : "
                f"{rank}[{rank}] -> {(rank + 1) % 8}[{(rank + 1) % 8}] via P2P/IPC/read"
            )
        elif kind < 0.85:
            lines.append(
                f"\x1b[32m2024-06-0{rank + 1} 12:{step % 60:02d}:{rank:02d}\x1b[0m | \x1b[1mINFO    \x1b[0m | "
                f"train:step:{step} - step={step} loss={rng.uniform(0.5, 3):.4f} tokens/s={rng.randint(9000, 12000)}"
            )
        elif kind < 0.95:
            lines.append(
                f"[rank{rank}]: {rng.choice(['eval', 'train'])} samples_per_second={rng.uniform(80, 120):.2f} "
                f"gpu_mem_alloc={rng.uniform(20, 70):.1f}GB step_time={rng.uniform(0.2, 0.4):.3f}s"
            )
        else:
            lines.append(
                "/usr/lib/python3.11/site-packages/torch/utils/checkpoint.py:464: UserWarning: "
                "torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly."
            )
    return "\n".join(lines) + "\n"


CRASH = """[rank3]: Traceback (most recent call last):
[rank3]:   File "/workspace/train.py", line 211, in <module>
[rank3]:     loss.backward()
[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 3 has a total capacity of 79.15 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.11 GiB memory in use. Of the allocated memory 71.20 GiB is allocated by PyTorch, and 5.34 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.
[rank0]:[E1107 03:14:15.123456789 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88211, OpType=ALLREDUCE, NumelIn=26738688, NumelOut=26738688, Timeout(ms)=600000) ran for 600043 milliseconds before timing out.
[rank1]:[E1107 03:14:15.223456789 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=88211, OpType=ALLREDUCE, NumelIn=26738688, NumelOut=26738688, Timeout(ms)=600000) ran for 600051 milliseconds before timing out.
E1107 03:14:20.000000 12345 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 3 (pid: 4321) of binary: /usr/bin/python
"""


def generate(path: Path, size_mb: int) -> None:
    rng = random.Random(7)
    blocks = [_block(rng, i * 1000).encode() for i in range(16)]
    target = size_mb * 1024 * 1024
    written = 0
    with path.open("wb") as out:
        index = 0
        while written < target - 4096:
            block = blocks[index % len(blocks)]
            out.write(block)
            written += len(block)
            index += 1
        out.write(CRASH.encode())


_IN_BRACKETS = {"d": "0-9", "s": "[:space:]", "w": "[:alnum:]_", "n": ""}
_OUTSIDE = {"d": "[0-9]", "s": "[[:space:]]", "S": "[^[:space:]]", "D": "[^0-9]"}


def ere(pattern: str) -> str:
    """A Python regex of the signatures as a POSIX ERE (GNU grep) that matches the same lines.

    Named and non-capturing groups become plain groups, lazy quantifiers greedy (the same lines
    match) and class escapes POSIX classes, inside bracket expressions too.
    """
    text = re.sub(r"\(\?P<\w+>", "(", pattern)
    # \x27 (a quote in a TOML literal string) as the character itself
    text = re.sub(r"\\x([0-9a-fA-F]{2})", lambda m: re.escape(chr(int(m.group(1), 16))), text)
    text = text.replace("(?:", "(").replace("(?i)", "")
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            escaped = text[index + 1]
            out.append(_OUTSIDE.get(escaped, "\\" + escaped))
            index += 2
        elif char == "[":
            close = index + 1
            negated = text[close : close + 1] == "^"
            close += 1 if negated else 0
            body: list[str] = []
            if text[close : close + 1] == "]":  # a leading "]" is a literal
                body.append("]")
                close += 1
            while close < len(text) and text[close] != "]":
                if text[close] == "\\" and close + 1 < len(text):
                    escaped = text[close + 1]
                    if escaped == "]":  # POSIX: a literal "]" goes first in the brackets
                        body.insert(0, "]")
                    else:
                        body.append(_IN_BRACKETS.get(escaped, escaped))
                    close += 2
                else:
                    body.append(text[close])
                    close += 1
            inner = "".join(body)
            out.append(
                "." if negated and not inner else "[" + ("^" if negated else "") + inner + "]"
            )
            index = close + 1
        else:
            out.append(char)
            index += 1
    return re.sub(r"([*+?}])\?", r"\1", "".join(out))


def run_measured(cmd: list[str], env: dict[str, str]) -> tuple[int, str, str, int]:
    """Run `cmd`; (exit code, stdout, stderr, its own peak RSS in KiB). os.wait4 reports the
    child's resource use alone, where RUSAGE_CHILDREN would take the largest of all children,
    grep's included."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (
            proc.returncode,
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
            usage.ru_maxrss,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--keep", action="store_true", help="keep the generated log")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of each, interleaved; medians compared"
    )
    args = parser.parse_args()
    from dlrig.knowledge.signatures import load

    signatures = load().signatures
    patterns = [ere(p.pattern) for s in signatures for p in s.patterns]
    log = Path(args.dir) / f"dlrig-bench-{args.size_mb}mb.log"
    if not log.exists():
        print(f"generating {args.size_mb} MB log at {log} ...", flush=True)
        generate(log, args.size_mb)
    size = log.stat().st_size
    subprocess.run(
        ["cat", str(log)], stdout=subprocess.DEVNULL, check=True
    )  # page cache warm for both

    grep = shutil.which("grep")
    grep_args = [grep or "grep", "-c", "-i", "-E"]
    for p in patterns:
        grep_args += ["-e", p]
    dlrig = shutil.which("dlrig", path=str(Path(sys.executable).parent)) or "dlrig"
    # As installed: pip writes each module's bytecode at install time. A shell with
    # PYTHONDONTWRITEBYTECODE (containers, CI) would make every run compile dlrig from source
    # (~0.2 s here), which is no part of scanning a log: the bytecode goes to a private cache
    # once, by an untimed run, and is read from there after.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(Path(tempfile.gettempdir()) / "dlrig-bench-pycache")
    with tempfile.NamedTemporaryFile("w", suffix=".log") as warm:
        warm.write("RuntimeError: CUDA out of memory.\n")
        warm.flush()
        warmed = subprocess.run(
            [dlrig, "diagnose", "--json", warm.name], env=env, capture_output=True, check=False
        )
        if warmed.returncode not in (0, 3):
            sys.exit(f"dlrig failed ({warmed.returncode}): {warmed.stderr[-500:]!r}")
    grep_times: list[float] = []
    dlrig_times: list[float] = []
    single_times: list[float] = []
    peak_kb = 0  # the dlrig runs' own peak RSS (os.wait4), not grep's
    # Interleaved, so a busy moment of a shared machine falls on both; the medians are compared.
    for _ in range(max(1, args.repeats)):
        start = time.perf_counter()
        grep_done = subprocess.run(
            [*grep_args, str(log)], capture_output=True, text=True, check=False
        )
        grep_times.append(time.perf_counter() - start)
        if grep_done.returncode not in (0, 1):
            sys.exit(f"grep failed: {grep_done.stderr[-500:]}")
        start = time.perf_counter()
        code, stdout, stderr, rss_kb = run_measured([dlrig, "diagnose", "--json", str(log)], env)
        dlrig_times.append(time.perf_counter() - start)
        peak_kb = max(peak_kb, rss_kb)
        if code not in (0, 3):
            sys.exit(f"dlrig failed ({code}): {stderr[-500:]}")
        # grep uses one thread; dlrig's anchor scan uses two where it may: both are shown
        start = time.perf_counter()
        single_code, _, single_err, single_kb = run_measured(
            [dlrig, "diagnose", "--json", str(log)], {**env, "DLRIG_DIAGNOSE_THREADS": "1"}
        )
        single_times.append(time.perf_counter() - start)
        peak_kb = max(peak_kb, single_kb)
        if single_code not in (0, 3):
            sys.exit(f"dlrig (one thread) failed ({single_code}): {single_err[-500:]!r}")
    grep_count = grep_done.stdout.strip()
    grep_s, dlrig_s = statistics.median(grep_times), statistics.median(dlrig_times)
    document = json.loads(stdout)
    root = document["causes"][0]["cause"] if document["causes"] else "none"

    from dlrig.diagnose.anchors import select_engine

    engine = select_engine(["x"]).name
    mb = size / 1e6
    print(
        f"log: {mb:,.0f} MB, {len(patterns)} signature patterns, median of {len(grep_times)} runs"
    )
    print(
        f"grep -c -i -E : {grep_s:6.2f} s  {mb / grep_s:7.1f} MB/s  (matching lines: {grep_count})"
    )
    print(f"dlrig diagnose: {dlrig_s:6.2f} s  {mb / dlrig_s:7.1f} MB/s  root cause: {root}")
    ratio = grep_s / dlrig_s
    single_s = statistics.median(single_times)
    print(
        f"dlrig, one thread: {single_s:6.2f} s  {mb / single_s:7.1f} MB/s  (DLRIG_DIAGNOSE_THREADS=1)"
    )
    print(
        f"throughput ratio dlrig/grep: {ratio:.2f} (target >= 3.00); one thread: {grep_s / single_s:.2f}"
    )
    print(f"dlrig peak RSS: {peak_kb / 1024:.0f} MB (target < 150 MB)")
    if not args.keep:
        os.unlink(log)
    print(
        f"ratio={ratio:.2f} dlrig_mb_s={mb / dlrig_s:.1f} grep_mb_s={mb / grep_s:.1f} "
        f"ratio_one_thread={grep_s / single_s:.2f} peak_rss_mb={peak_kb / 1024:.0f} "
        f"patterns={len(patterns)} root={root} "
        f"engine={engine} ratio_ok={ratio >= 3.0} rss_ok={peak_kb / 1024 < 150}"
    )


if __name__ == "__main__":
    import results  # benchmarks/results.py: run as a script, its folder is on sys.path

    with results.record(__file__):
        main()

"""Real DDP: `dlrig train --gpus 2` starts torchrun with two gloo processes.

One launch runs four scenarios (tests/data/train_scripts/ddp_checks.py); a second, beside it,
shows a stalled rank turned into an error that names it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import WeightedRandomSampler

from tests.conftest import ROOT

# The module's two launches run side by side by design: its tests stay on one xdist worker.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("ddp")]
SCRIPTS = ROOT / "tests" / "data" / "train_scripts"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["OMP_NUM_THREADS"] = "1"
    return env


@pytest.fixture(scope="module")
def stalled(tmp_path_factory):
    """The stalled-rank launch, started first so that it runs beside the scenarios' launch
    (they share nothing; the stalled ranks meet before their short timeout starts)."""
    meeting = tmp_path_factory.mktemp("meeting")
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(SCRIPTS / "slow_rank.py"),
            str(meeting),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        cwd=ROOT,
        start_new_session=True,  # torchrun and its ranks: one group to kill
    )
    yield process
    if process.poll() is None:
        # Not consumed here (the module's tests ran apart, so this is a second launch): stop
        # torchrun and its ranks, which torchrun may start in sessions of their own.
        import psutil

        tree = [process.pid, *(c.pid for c in psutil.Process(process.pid).children(True))]
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        process.communicate(timeout=30)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory, stalled):
    out = tmp_path_factory.mktemp("ddp")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dlrig.cli.main",
            "train",
            "--gpus",
            "2",
            "--json",
            str(SCRIPTS / "ddp_checks.py"),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        env=_env(),
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    document = json.loads(done.stdout)
    assert document["schema"] == "dlrig.train" and document["exit_code"] == 0
    assert "--nproc-per-node=2" in document["command"]
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    return out, results, done.stderr


def _reference_sgd(steps: int = 3) -> torch.nn.Module:
    """One process, the whole global batch of 16 per step, plain SGD."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        import ddp_checks
    finally:
        sys.path.pop(0)
    data = ddp_checks.data()
    model = ddp_checks.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        x, y = (
            data.tensors[0][16 * step : 16 * step + 16],
            data.tensors[1][16 * step : 16 * step + 16],
        )
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model


def test_accumulation_with_no_sync_equals_one_process_with_the_whole_batch(ranks):
    out, results, _ = ranks
    reference = _reference_sgd()
    trained = torch.load(out / "accumulation.pt")
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(trained[name], value, atol=1e-6, rtol=1e-5)
    for result in results:
        acc = result["accumulation"]
        assert acc["plan"]["accumulation"] == 4 and acc["plan"]["global_batch"] == 16
        # 3 steps × 4 micro-steps, one bucket: one all-reduce per step, none per micro-step.
        assert acc["allreduce_launches"] == 3
    assert results[0]["accumulation"]["weights_sum"] == results[1]["accumulation"]["weights_sum"]


def test_a_users_weighted_random_sampler_survives(ranks):
    _, results, _ = ranks
    weights = torch.zeros(40)
    weights[[3, 7, 11, 20]] = torch.tensor([1.0, 2.0, 4.0, 8.0])
    sampler = WeightedRandomSampler(
        weights, 30, replacement=True, generator=torch.Generator().manual_seed(7)
    )
    for epoch in range(2):
        drawn = list(sampler)  # what the user's sampler gives in one process, epoch by epoch
        per_rank = [
            [i for batch in result["weighted"]["epochs"][epoch] for i in batch]
            for result in results
        ]
        interleaved = [per_rank[i % 2][i // 2] for i in range(len(drawn))]
        assert interleaved == drawn
    assert any("your WeightedRandomSampler kept" in t for t in results[0]["weighted"]["decisions"])


def test_an_oom_on_one_rank_backs_off_on_both(ranks):
    out, results, stderr = ranks
    for result in results:
        oom = result["oom"]
        assert oom["plan"] == {
            "global_batch": 16,
            "world_size": 2,
            "per_rank_batch": 8,
            "micro_batch": 4,
            "accumulation": 2,
        }
        assert oom["samples_per_step"] == [16, 16, 16]
        assert oom["steps"] == 3
    assert results[0]["oom"]["weights_sum"] == results[1]["oom"]["weights_sum"]
    assert (
        "step 2: out of memory on 1 of 2 ranks at micro-batch 8 -> micro-batch 4 on every rank"
        in stderr
    )
    reference = _reference_sgd()
    trained = torch.load(out / "oom.pt")
    for name, value in reference.state_dict().items():
        torch.testing.assert_close(trained[name], value, atol=1e-6, rtol=1e-5)


def test_fsdp_state_is_sharded_through_dcp_and_resumes_exactly(ranks):
    _, results, _ = ranks
    for result in results:
        assert result["fsdp"]["resumed_equal"] is True
        assert result["fsdp"]["dcp_files"] == [".metadata", "__0_0.distcp", "__1_0.distcp"]


def test_a_stalled_rank_is_named_instead_of_a_hang(stalled):
    _, stderr = stalled.communicate(timeout=300)
    assert stalled.returncode != 0
    assert "rank 1 did not reach the gradient all-reduce of step 3 within 2 s" in stderr
    # Named while rank 1 was still stalled (a minute): not after a hang ended by itself.
    assert "rank 1 woke up" not in stderr

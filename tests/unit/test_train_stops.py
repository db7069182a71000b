"""What a run says and does at its edges: the batch equation is what is really run, options
that would train wrongly are refused, a resumed run with nothing left says so, and stop
signals (SIGTERM, Ctrl-C, SIGHUP) end with a checkpoint, repeats ignored.

The signals are real: sent to this process with os.kill; the handlers are given back after
each run (checked), so the test process is left as it was."""

from __future__ import annotations

import json
import os
import signal

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from dlrig import train
from dlrig.errors import InputError
from dlrig.train import stopping
from dlrig.train.accumulation import BatchPlan, split


def _data(count: int = 40) -> TensorDataset:
    g = torch.Generator().manual_seed(2)
    return TensorDataset(
        torch.randn(count, 4, generator=g), torch.randint(0, 2, (count,), generator=g)
    )


def _run_seeing_micro_batches(loader_batch: int, **options: object) -> tuple[list[int], str]:
    """One step; the micro-batch sizes `loss_fn` saw and the batch decision printed."""
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    run = train.Run(quiet=True, max_steps=1, **options)  # type: ignore[arg-type]
    model, _ = run.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    loader = run.setup_dataloader(DataLoader(_data(200), batch_size=loader_batch))
    seen: list[int] = []

    def loss_fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        seen.append(len(x))
        return F.cross_entropy(model(x), y)

    for x, y in loader:
        run.step(loss_fn, x, y)
    summary = run.finish()
    (decision,) = [d.text for d in summary.decisions if d.key == "batch"]
    return seen, decision


@pytest.mark.parametrize(
    ("options", "sizes", "equation"),
    [
        (
            {"global_batch": 100, "micro_batch": 32},
            [32, 32, 32, 4],
            "global batch 100 = 1 rank × 4 micro-steps (3 of 32 samples, 1 of 4)",
        ),
        (
            {"global_batch": 64, "accumulation": 3},
            [22, 22, 20],
            "global batch 64 = 1 rank × 3 micro-steps (2 of 22 samples, 1 of 20)",
        ),
        (
            {"global_batch": 64, "micro_batch": 16},
            [16, 16, 16, 16],
            "global batch 64 = 1 rank × 4 micro-steps × 16 samples",
        ),
    ],
    ids=["micro-does-not-divide", "accumulation-does-not-divide", "divides"],
)
def test_the_printed_batch_equation_is_what_runs(options, sizes, equation):
    seen, decision = _run_seeing_micro_batches(8, **options)
    assert seen == sizes and sum(seen) == options["global_batch"]
    assert decision.startswith(equation), decision


def test_the_equation_holds_on_several_ranks():
    plan = BatchPlan(global_batch=200, world_size=2, micro_batch=32)
    assert plan.micro_sizes() == [32, 32, 32, 4]
    assert plan.describe() == "global batch 200 = 2 ranks × 4 micro-steps (3 of 32 samples, 1 of 4)"
    # What split() cuts a rank's batch into is what the equation says.
    parts = split((torch.zeros(plan.per_rank, 3),), plan.micro_batch)
    assert [len(args[0]) for args, _ in parts] == plan.micro_sizes()
    assert sum(weight for _, weight in parts) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"clip_grad_norm": -1.0}, "clip_grad_norm=-1.0 is not a positive number"),
        ({"clip_grad_norm": 0.0}, "clip_grad_norm=0.0 is not a positive number"),
        ({"clip_grad_norm": float("nan")}, "clip_grad_norm=nan is not a positive number"),
        ({"global_batch": True}, "global_batch=True"),
        ({"keep_checkpoints": 0}, "keep_checkpoints=0"),
    ],
    ids=["negative-clip", "zero-clip", "nan-clip", "bool-batch", "no-checkpoints-kept"],
)
def test_options_that_would_train_wrongly_are_refused(options, words):
    with pytest.raises(InputError, match=words.replace("(", r"\(").replace(")", r"\)")):
        train.Options(**options)


def _epochs_run(
    directory, epochs: int, **options: object
) -> tuple[train.Summary, train.Run, list[int]]:
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    run = train.Run(quiet=True, checkpoint_dir=directory, **options)  # type: ignore[arg-type]
    model, _ = run.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    loader = run.setup_dataloader(DataLoader(_data(24), batch_size=8, shuffle=True))
    stepped = []
    for _ in run.epochs(epochs):
        for x, y in loader:
            run.step(lambda a, b: F.cross_entropy(model(a), b), x, y)
            stepped.append(run.steps)
    return run.finish(), run, stepped


def _listing(directory) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted(directory.rglob("*"))}


@pytest.mark.parametrize("limit", ["epochs", "max_steps"])
def test_resuming_a_finished_run_says_nothing_is_left_and_writes_nothing(tmp_path, limit):
    options = {"max_steps": 5} if limit == "max_steps" else {}
    first, _, stepped = _epochs_run(tmp_path, 3, **options)
    assert stepped[-1] == first.steps == (5 if limit == "max_steps" else 9)
    assert first.nothing_left is None
    before = _listing(tmp_path)

    again, run, stepped = _epochs_run(tmp_path, 3, **options)
    assert stepped == [] and again.steps == first.steps and again.samples == first.samples
    reason = "max_steps=5 is reached" if limit == "max_steps" else "the 3 epochs are done"
    assert again.nothing_left == reason
    assert again.to_dict()["nothing_left"] == reason
    (line,) = again.lines()  # no "where the time went: 0% / 0% / 0%"
    assert "nothing was left to train" in line and reason in line
    assert _listing(tmp_path) == before, "the finished checkpoint was written again"
    assert run.last_checkpoint == tmp_path / f"step-{first.steps:08d}"


def _signalled_run(tmp_path, sends: list[int], at_step: int = 3):
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    run = train.Run(quiet=True, checkpoint_dir=tmp_path, save_on_sigterm=True, max_steps=20)
    model, _ = run.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    loader = run.setup_dataloader(DataLoader(_data(), batch_size=4))
    with pytest.raises(SystemExit) as stopped:
        for _ in run.epochs(10):
            for x, y in loader:
                if run.steps == at_step - 1:
                    for signum in sends:  # during the step: handled before it ends
                        os.kill(os.getpid(), signum)
                run.step(lambda a, b: F.cross_entropy(model(a), b), x, y)
    return run, stopped.value.code


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["SIGTERM", "SIGINT", "SIGHUP"]
)
def test_a_stop_signal_checkpoints_the_step_and_exits_with_its_code(tmp_path, monkeypatch, signum):
    handlers = {s: signal.getsignal(s) for s in stopping.STOP_SIGNALS}
    launcher = tmp_path / "summary.json"  # where `dlrig train` would read the summary
    monkeypatch.setenv("DLRIG_TRAIN_SUMMARY", str(launcher))
    # Three copies, as a Ctrl-C gives a torchrun worker (terminal, agent, dlrig): one stop.
    run, code = _signalled_run(tmp_path / "ckpt", [signum, signum, signum])
    assert code == 128 + signum
    assert run.steps == 3 and run.stopped_by == signal.Signals(signum).name
    assert (tmp_path / "ckpt" / "latest").read_text().strip() == "step-00000003"
    assert {s: signal.getsignal(s) for s in stopping.STOP_SIGNALS} == handlers
    summary = json.loads(launcher.read_text())
    assert summary["stopped_by"] == signal.Signals(signum).name and summary["steps"] == 3
    assert summary["last_checkpoint"] == str(tmp_path / "ckpt" / "step-00000003")


def test_ctrl_c_again_after_a_moment_stops_at_once(tmp_path, monkeypatch):
    # The moment after which a second Ctrl-C is the user insisting, not a copy: none here.
    monkeypatch.setattr(stopping, "INSIST_AFTER_S", 0.0)
    handlers = {s: signal.getsignal(s) for s in stopping.STOP_SIGNALS}
    with pytest.raises(KeyboardInterrupt):
        _signalled_run(tmp_path, [signal.SIGINT, signal.SIGINT])
    assert not (tmp_path / "latest").exists()  # stopped without waiting for the checkpoint
    assert {s: signal.getsignal(s) for s in stopping.STOP_SIGNALS} == handlers


def test_a_stop_signal_is_visible_to_the_users_own_loops(tmp_path):
    handlers = {s: signal.getsignal(s) for s in stopping.STOP_SIGNALS}
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    run = train.Run(quiet=True, checkpoint_dir=tmp_path, save_on_sigterm=True)
    run.setup(net, torch.optim.SGD(net.parameters(), lr=0.1))
    try:
        assert run.stop_signal is None
        os.kill(os.getpid(), signal.SIGTERM)
        assert run.stop_signal == "SIGTERM"  # an evaluation loop can stop on it
    finally:
        run.close()
    assert {s: signal.getsignal(s) for s in stopping.STOP_SIGNALS} == handlers

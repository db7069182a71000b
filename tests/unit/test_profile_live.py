"""`dlrig.profile.Session` and the in-process driver on real CPU training steps
(torch.profiler, FlopCounterMode and the optimizer hook for real)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dlrig import fit, profile
from dlrig.profile import live

pytestmark = pytest.mark.slow


def test_flops_of_a_real_step_match_what_fit_counts(tmp_path):
    """A GPT-2 shaped model (two blocks, random weights): FlopCounterMode over one real
    training step, against the FLOPs `dlrig fit` counts for the same config, batch and
    sequence; the MFU figure divides this count by the step time and the GPU's peak."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=2, n_embd=128, n_head=4, vocab_size=512, n_positions=64)
    config.save_pretrained(tmp_path / "tiny")
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    with profile.Session(steps=2, out=tmp_path / "prof") as session:
        for _ in range(6):
            ids = torch.randint(0, 512, (4, 64))
            model(input_ids=ids, labels=ids).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    assert session.report is not None and session.trace is not None
    rank = session.report.ranks[0]
    assert len(rank.steps) == 2
    assert rank.mfu.flops_source == "FlopCounterMode"
    fitted = fit.estimate(
        fit.Options(
            model=None,
            config=str(tmp_path / "tiny"),
            batch_size=4,
            seq_len=64,
            gpu="a100-sxm4-80gb",
            search_max_batch=False,
            advise=False,
        )
    )
    assert fitted.method == "trace"
    assert rank.mfu.flops_per_step == pytest.approx(fitted.flops_per_step, rel=0.05)
    assert rank.mfu.value is None and "CPU" in (rank.mfu.note or "")  # no peak for a CPU
    assert rank.optimizers == {"AdamW": {"foreach": None, "fused": None}}


def test_a_loop_without_an_optimizer_steps_by_hand(tmp_path):
    import torch

    model = torch.nn.Linear(32, 32)
    with profile.Session(steps=3, out=tmp_path, auto_step=False, flops=False) as session:
        for _ in range(8):
            with torch.no_grad():
                model(torch.randn(64, 32))
            session.step()
    assert session.report is not None
    rank = session.report.ranks[0]
    assert [s.name for s in rank.steps] == ["ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"]
    assert rank.mfu.flops_source is None


def test_fewer_steps_than_asked_still_gives_what_ran(tmp_path):
    """A job that ends inside the recorded window: the steps that ran whole are reported; the
    one cut short by the end (after the last optimizer step) is left out."""
    import torch

    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile.Session(steps=10, out=tmp_path) as session:
        for _ in range(6):
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
    assert session.report is not None
    # steps 1 (cold), 2 (FLOPs), 3 (warm-up) unrecorded; 4, 5, 6 recorded; the tail cut
    assert [s.name for s in session.report.ranks[0].steps] == [
        "ProfilerStep#2",
        "ProfilerStep#3",
        "ProfilerStep#4",
    ]


def test_the_programs_own_sitecustomize_still_runs(tmp_path):
    """dlrig's boot folder goes first on PYTHONPATH; a sitecustomize the program had (a
    conda or site one) must still run."""
    own = tmp_path / "site"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITE'] = 'ran'\n")
    env = live.environment(tmp_path / "out", live.Options())
    env["PYTHONPATH"] += os.pathsep + str(own)
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ.get('OWN_SITE'))"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.strip() == "ran", done.stderr
    assert "not profiling" not in done.stderr


def test_dlrig_train_profiles_the_steps_it_is_asked_to(tmp_path, capsys):
    """`profile_steps` in dlrig.train (`dlrig train --profile-steps N`): the run's own loop is
    profiled and its verdict said at the end; here the data is slow to load."""
    import time

    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, Dataset

    from dlrig import train

    class Slow(Dataset):
        def __len__(self) -> int:
            return 48

        def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
            time.sleep(0.005)
            return torch.full((4,), float(index)), index % 2

    model = torch.nn.Linear(4, 2)
    run = train.Run(profile_steps=3, log_dir=tmp_path, progress=False)
    model, _ = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    for x, y in run.setup_dataloader(DataLoader(Slow(), batch_size=4)):
        run.step(lambda a, b: F.cross_entropy(model(a), b), x, y)
    run.finish()
    report = run.profile_report
    assert report is not None and len(report.ranks[0].steps) == 3
    assert report.verdict is not None and report.verdict.cause == "input_pipeline_bound"
    # one process, no rank: the file is named by the process id
    assert [p.name for p in (tmp_path / "profile").glob("trace-*.json.gz")] == [
        f"trace-pid{os.getpid()}.json.gz"
    ]
    said = capsys.readouterr()
    assert "profile:" in said.out + said.err and "Input-bound" in said.out + said.err


def test_a_program_that_runs_its_own_profiler_keeps_it(tmp_path, capsys):
    """One profiler per process: where the program runs torch.profiler itself, dlrig steps
    aside (and says so) instead of taking the session over and leaving the program's empty."""
    import torch

    model = torch.nn.Linear(8, 8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with torch.profiler.profile() as own, profile.Session(steps=2, out=tmp_path) as session:
        for _ in range(6):
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
    assert session.report is None and session.trace is None
    assert "runs torch.profiler itself" in capsys.readouterr().err
    assert sum(e.name.startswith("Optimizer.step") for e in own.events()) == 6

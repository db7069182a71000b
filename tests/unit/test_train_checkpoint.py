"""Checkpoints on disk: one folder per step, `latest` moved last, K kept, partial ones ignored,
and a resume in a new Run that continues exactly."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from dlrig import train
from dlrig.train import checkpoint as ckpt


def _fit(directory: Path, steps: int, **options) -> tuple[torch.nn.Module, train.Run]:
    model, run, _summary = _fit_summary(directory, steps, **options)
    return model, run


def _fit_summary(directory: Path, steps: int, **options) -> tuple[torch.nn.Module, train.Run, Any]:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(30, 5), torch.randint(0, 2, (30,)))
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Dropout(0.3), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=20)
    run = train.Run(
        quiet=True,
        checkpoint_dir=directory,
        checkpoint_every_steps=3,
        keep_checkpoints=2,
        max_steps=steps,
        **options,
    )
    wrapped, optimizer = run.setup(model, optimizer, scheduler)
    loader = run.setup_dataloader(DataLoader(data, batch_size=4, shuffle=True))
    for _epoch in run.epochs(100):
        for x, y in loader:
            run.step(lambda a, b: F.cross_entropy(wrapped(a), b), x, y)
    summary = run.finish()
    return model, run, summary


def test_layout_keep_latest_and_permissions(tmp_path):
    old = os.umask(0o027)
    try:
        _fit(tmp_path, 10)
    finally:
        os.umask(old)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["latest", "step-00000009", "step-00000010"]  # 3, 6 pruned: keep 2
    assert (tmp_path / "latest").read_text().strip() == "step-00000010"
    folder = tmp_path / "step-00000010"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["step"] == 10 and manifest["format"] == "torch"
    assert manifest["files"] == ["rank-00000.pt", "shared.pt"]
    assert stat.S_IMODE((folder / "shared.pt").stat().st_mode) == 0o640
    assert not list(folder.glob(".*tmp"))


def test_resume_in_a_new_run_equals_an_uninterrupted_run(tmp_path):
    straight, _ = _fit(tmp_path / "a", 17)
    _fit(tmp_path / "b", 8)  # stops mid-epoch (7.5 batches an epoch)
    resumed, run = _fit(tmp_path / "b", 17)
    assert run.steps == 17
    for p, q in zip(straight.state_dict().values(), resumed.state_dict().values(), strict=True):
        assert torch.equal(p, q)


def test_a_resumed_runs_summary_says_what_this_process_did(tmp_path):
    # Before, the summary after a resume gave the whole run's 17 steps as this process's.
    # 30 samples in batches of 4: the first run's 8 steps end with the epoch's 2-sample batch.
    _fit(tmp_path, 8)
    _, _, summary = _fit_summary(tmp_path, 17)
    assert (summary.steps, summary.resumed_at_step, summary.steps_this_process) == (17, 8, 9)
    assert summary.lines()[0].startswith("9 steps, 34 samples in this process (resumed at step 8")
    document = summary.to_dict()
    assert document["steps_this_process"] == 9 and document["samples_this_process"] == 34
    _, _, fresh = _fit_summary(tmp_path / "fresh", 5)
    assert fresh.resumed_at_step == 0 and fresh.lines()[0].startswith("5 steps, 20 samples;")


def test_a_partial_folder_and_a_stale_pointer_are_ignored(tmp_path):
    _fit(tmp_path, 6)
    (tmp_path / ".step-00000009.partial").mkdir()  # a run killed while writing step 9
    (tmp_path / "step-00000012").mkdir()  # no manifest: never committed
    assert ckpt.find_latest(tmp_path) == tmp_path / "step-00000006"
    (tmp_path / "latest").write_text("step-00000012\n")
    assert ckpt.find_latest(tmp_path) == tmp_path / "step-00000006"
    _, run = _fit(tmp_path, 7)
    assert run.steps == 7
    assert not (tmp_path / ".step-00000009.partial").exists()


def test_resume_false_starts_over(tmp_path):
    _fit(tmp_path, 4)
    _, run = _fit(tmp_path, 2, resume=False)
    assert run.steps == 2

"""TensorBoard scalars read back by TensorBoard's own reader, GPU readings from a recorded
capture through the monitor's sampler, the summary's finding, and the import cost."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, TensorDataset

from dlrig import monitor, train
from tests.conftest import NVSMI


def test_scalars_read_back_with_event_accumulator(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    capture = NVSMI / "h200-capture-idle-load.txt"
    source = monitor.open_source(replay=[str(capture)], replay_state="load")
    expected = (
        monitor.Sampler(monitor.open_source(replay=[str(capture)], replay_state="load"), host=False)
        .sample_once()
        .readable()[0]
    )
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    run = train.Run(quiet=True, log_dir=tmp_path, log_every_steps=2, gpu_monitor=source)
    model, _optimizer = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.05))
    loader = run.setup_dataloader(
        DataLoader(TensorDataset(torch.randn(48, 4), torch.randint(0, 2, (48,))), batch_size=8)
    )
    assert run.observer is not None and run.observer.sampler is not None
    run.observer.sampler.wait_for_sample(timeout=5)
    losses = {}
    for x, y in loader:
        loss = run.step(lambda a, b: F.cross_entropy(model(a), b), x, y)
        losses[run.steps] = loss.item()
    run.finish()

    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {
        "train/loss",
        "train/lr",
        "train/samples_per_s",
        "train/step_time_ms",
        "train/data_wait_ms",
    } <= tags
    logged = {e.step: e.value for e in events.Scalars("train/loss")}
    assert sorted(logged) == [2, 4, 6]
    for step, value in logged.items():
        assert value == pytest.approx(losses[step], rel=1e-6)
    assert all(e.value == pytest.approx(0.05) for e in events.Scalars("train/lr"))
    assert all(e.value > 0 for e in events.Scalars("train/samples_per_s"))
    utilisation = events.Scalars(f"gpu{expected.index}/utilization_percent")
    assert utilisation and utilisation[0].value == pytest.approx(expected.utilization_gpu_percent)
    memory = events.Scalars(f"gpu{expected.index}/memory_used_bytes")
    assert memory[0].value == pytest.approx(expected.memory_used_bytes, rel=1e-6)


class Slow(Dataset):
    """Decoding that takes longer than the step: the loop waits for data."""

    def __len__(self) -> int:
        return 40

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.01)
        return torch.full((4,), float(index)), index % 2


def test_summary_names_the_input_pipeline_when_data_wait_dominates():
    model = torch.nn.Linear(4, 2)
    run = train.Run(quiet=True)
    model, _optimizer = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    loader = run.setup_dataloader(DataLoader(Slow(), batch_size=4))
    for x, y in loader:
        run.step(lambda a, b: F.cross_entropy(model(a), b), x, y)
    summary = run.finish()
    shares = summary.split.shares()
    assert shares["data_wait"] > shares["compute"]
    (finding,) = summary.findings
    assert finding.cause == "input_pipeline_bound"
    assert "num_workers=0" in finding.text
    assert "DataLoader(dataset, batch_size=4, shuffle=True, num_workers=" in finding.fix
    assert "dlrig bench dataloader" in finding.fix
    document = summary.to_dict()
    assert list(document)[:2] == ["schema", "schema_version"]
    assert document["schema"] == "dlrig.train"
    assert document["findings"][0]["cause"] == "input_pipeline_bound"


def test_no_finding_when_compute_dominates():
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
    run = train.Run(quiet=True)
    model, _optimizer = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.0))
    loader = run.setup_dataloader(DataLoader(TensorDataset(torch.randn(64, 256)), batch_size=32))
    for _ in range(3):
        for (x,) in loader:
            run.step(lambda a: model(a).pow(2).mean(), x)
    assert run.finish().findings == ()


def test_import_adds_nothing_heavy_beyond_torch():
    code = (
        "import sys, torch; before = set(sys.modules); import dlrig.train; "
        "new = set(sys.modules) - before; "
        "heavy = ('tensorboard', 'transformers', 'lightning', 'accelerate', 'dlrig.fit', "
        "'dlrig.monitor', 'dlrig.diagnose', 'matplotlib', 'rich'); "
        "print(sorted(m for m in new if m.split('.')[0] in heavy or m.startswith(heavy)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

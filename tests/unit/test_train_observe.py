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
from dlrig.train import summary
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
    assert run.observer.sampler.wait_for_sample(timeout=60) is not None
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


def test_the_finding_is_made_from_the_measured_durations():
    """The rule on measured durations, through the summary's own API: no clock involved."""
    loader = DataLoader(TensorDataset(torch.zeros(8, 4)), batch_size=4)
    waited = summary.TimeSplit(total_s=10.0, data_wait_s=6.0, comm_s=1.0)
    finding = summary.input_bound(waited, loader, per_rank_batch=4, cuda=False)
    assert finding is not None and finding.cause == "input_pipeline_bound"
    assert "waited for data 60% of the time (6.0 s of 10.0 s) with num_workers=0" in finding.text
    assert "DataLoader(dataset, batch_size=4, shuffle=True, num_workers=" in finding.fix
    assert "dlrig bench dataloader --dataset module:factory --batch-size 4" in finding.fix
    for busy in (
        summary.TimeSplit(total_s=10.0, data_wait_s=2.0, comm_s=1.0),  # compute 7 s
        summary.TimeSplit(total_s=10.0, data_wait_s=3.0, comm_s=5.0),  # communication
        summary.TimeSplit(total_s=0.0, data_wait_s=0.0, comm_s=0.0),  # no timed step
    ):
        assert summary.input_bound(busy, loader, per_rank_batch=4, cuda=False) is None
    assert summary.TimeSplit(10.0, 6.0, 1.0).shares() == pytest.approx(
        {"data_wait": 0.6, "compute": 0.3, "communication": 0.1}
    )


class Slow(Dataset):
    """Decoding that takes 200 ms a batch of 4, against a step of a fraction of a millisecond
    of CPU: the loop waits for data by orders of magnitude. A busy machine stretches the step's
    wall time (at a load of 10 on 2 cores, tens of ms), never to this."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        time.sleep(0.05)
        return torch.full((4,), float(index)), index % 2


def test_a_run_that_waits_for_data_names_the_input_pipeline():
    model = torch.nn.Linear(4, 2)
    run = train.Run(quiet=True)
    model, _optimizer = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.01))
    loader = run.setup_dataloader(DataLoader(Slow(), batch_size=4))
    for x, y in loader:
        run.step(lambda a, b: F.cross_entropy(model(a), b), x, y)
    result = run.finish()
    (finding,) = result.findings  # the classification only: never a share's value
    assert finding.cause == "input_pipeline_bound"
    assert "num_workers=0" in finding.text and "dlrig bench dataloader" in finding.fix
    document = result.to_dict()
    assert list(document)[:2] == ["schema", "schema_version"]
    assert document["schema"] == "dlrig.train"
    assert document["findings"][0]["cause"] == "input_pipeline_bound"


def test_no_finding_when_compute_dominates():
    """A step that takes 200 ms (a sleep in the loss: compute by orders of magnitude) against
    batches already in memory (microseconds of CPU to hand over)."""
    model = torch.nn.Linear(8, 2)
    run = train.Run(quiet=True)
    model, _optimizer = run.setup(model, torch.optim.SGD(model.parameters(), lr=0.0))
    loader = run.setup_dataloader(DataLoader(TensorDataset(torch.randn(16, 8)), batch_size=4))

    def slow_loss(a: torch.Tensor) -> torch.Tensor:
        time.sleep(0.2)
        return model(a).pow(2).mean()

    for (x,) in loader:
        run.step(slow_loss, x)
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


def test_unmeasured_communication_is_left_out_not_logged_as_zero():
    from dlrig.train.observe import Observer

    observer = Observer(None, 0, None, None, None, False)  # type: ignore[arg-type]
    observer.reset(0, 0, 0.0, 0.0)
    time.sleep(0.01)
    unmeasured = observer.record(2, 16, 0.001, None, None, None, 0)
    assert "train/comm_ms" not in unmeasured
    assert unmeasured["train/step_time_ms"] > 0
    measured = observer.record(4, 32, 0.002, 0.004, None, None, 0)
    assert measured["train/comm_ms"] == pytest.approx(2.0)

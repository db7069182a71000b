"""The user's loader: their sampler kept, resumable positions, IterableDatasets left alone."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    SequentialSampler,
    TensorDataset,
    WeightedRandomSampler,
)

from dlrig import train
from dlrig.errors import InputError


def _indices(loader) -> list[list[int]]:
    return [batch[0].tolist() for batch in loader]


def _run(**options) -> train.Run:
    run = train.Run(quiet=True, **options)
    net = torch.nn.Linear(1, 1)
    run.setup(net, torch.optim.SGD(net.parameters(), lr=0.0))
    return run


def test_weighted_random_sampler_is_kept_not_replaced():
    dataset = TensorDataset(torch.arange(50))
    weights = torch.zeros(50)
    weights[[2, 9, 31]] = torch.tensor([1.0, 1.0, 6.0])

    def loader() -> DataLoader:
        sampler = WeightedRandomSampler(weights, 24, generator=torch.Generator().manual_seed(4))
        return DataLoader(dataset, batch_size=4, sampler=sampler)

    plain = _indices(loader())
    run = _run()
    ours = _indices(run.setup_dataloader(loader()))
    assert ours == plain
    assert {i for batch in ours for i in batch} <= {2, 9, 31}
    assert any("your WeightedRandomSampler kept" in d.text for d in run.log.decisions)


def test_a_custom_batch_sampler_is_kept():
    dataset = TensorDataset(torch.arange(10))
    sampler = BatchSampler(SequentialSampler(range(10)), batch_size=3, drop_last=False)

    class Buckets(BatchSampler):  # a user's own batching (e.g. by length)
        pass

    buckets = Buckets(SequentialSampler(range(10)), batch_size=3, drop_last=False)
    run = _run()
    assert _indices(run.setup_dataloader(DataLoader(dataset, batch_sampler=buckets))) == [
        list(b) for b in sampler
    ]
    assert any("your batch sampler Buckets kept" in d.text for d in run.log.decisions)


def test_iterable_dataset_passes_through():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(torch.arange(12).split(1))

    run = _run()
    loader = run.setup_dataloader(DataLoader(Stream(), batch_size=4))
    assert [b.flatten().tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def test_global_batch_resizes_the_loader_batch_and_says_so():
    run = _run(global_batch=6)
    loader = run.setup_dataloader(DataLoader(TensorDataset(torch.arange(12)), batch_size=4))
    assert [len(b) for b in _indices(loader)] == [6, 6]
    assert any("loader batch 4 -> 6 per rank" in d.text for d in run.log.decisions)


def test_drop_last_is_respected():
    run = _run()
    loader = run.setup_dataloader(
        DataLoader(TensorDataset(torch.arange(10)), batch_size=4, drop_last=True)
    )
    assert _indices(loader) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(loader) == 2


def test_not_a_dataloader_is_an_input_error():
    run = _run()
    with pytest.raises(InputError, match="not a torch DataLoader"):
        run.setup_dataloader([1, 2, 3])
    with pytest.raises(InputError, match="batch_size=None"):
        run.setup_dataloader(DataLoader(TensorDataset(torch.arange(3)), batch_size=None))


def test_epochs_and_max_steps_stop_mid_epoch_and_set_the_position():
    run = _run(max_steps=5)
    loader = run.setup_dataloader(DataLoader(TensorDataset(torch.arange(12)), batch_size=4))
    seen = []
    for epoch in run.epochs(10):
        for (index,) in loader:
            run.step(lambda i: (i.float() * 0).sum().requires_grad_(), index)
            seen.append((epoch, index[0].item()))
    assert seen == [(0, 0), (0, 4), (0, 8), (1, 0), (1, 4)]
    assert run.stopped_by == "max_steps"
    assert (loader.position.epoch, loader.position.consumed) == (1, 2)

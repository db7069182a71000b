"""dlrig.pack's torch datasets under the real torch DataLoader (real worker processes)."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import pytest
import torch
from PIL import Image
from torch.utils.data import DataLoader

from dlrig import pack
from tests.unit.test_pack_trees import make_tree

BATCH = 8
# 4 workers on a 2-core CI box is the point of the test, not a mistake.
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pack")
    make_tree(root / "src", classes=3, per_class=40)  # 120 real JPEGs
    pack.pack(root / "src", root / "dst", pack.PackOptions(shard_bytes=25_000, jobs=2))
    return root / "dst"


def _names(batch: list[tuple[bytes, int]]) -> list[bytes]:
    return [data for data, _ in batch]


def _loader(stream: pack.IterableDataset, workers: int, **kwargs: object) -> pack.StatefulLoader:
    return pack.StatefulLoader(stream, num_workers=workers, collate_fn=_names, **kwargs)


def test_four_workers_times_two_ranks_read_every_sample_once(packed: Path) -> None:
    seen: Counter[bytes] = Counter()
    for rank in range(2):
        stream = pack.IterableDataset(packed, batch_size=BATCH, rank=rank, world_size=2, seed=5)
        for batch in DataLoader(stream, batch_size=BATCH, num_workers=4, collate_fn=_names):
            seen.update(batch)
    reference = pack.Dataset(packed)
    assert sum(seen.values()) == len(reference) == 120
    assert set(seen) == {reference[i][0] for i in range(len(reference))}
    assert max(seen.values()) == 1


def test_order_does_not_depend_on_worker_count_and_resumes(packed: Path) -> None:
    def stream() -> pack.IterableDataset:
        return pack.IterableDataset(packed, batch_size=BATCH, rank=1, world_size=2, seed=9)

    whole = [x for batch in _loader(stream(), 0) for x in batch]
    assert whole == [x for batch in _loader(stream(), 3) for x in batch]
    loader = _loader(stream(), 2)
    iterator = iter(loader)
    head = [x for _ in range(3) for x in next(iterator)]
    state = loader.state_dict()
    assert state["position"] == 3 * BATCH and state["epoch"] == 0
    del iterator
    resumed = _loader(stream(), 4)
    resumed.load_state_dict(state)
    assert head + [x for batch in resumed for x in batch] == whole
    assert resumed.state_dict()["epoch"] == 1  # the full pass moved it on
    with pytest.raises(Exception, match="differs in seed"):
        _loader(
            pack.IterableDataset(packed, batch_size=BATCH, rank=1, world_size=2), 0
        ).load_state_dict(state)


def test_persistent_workers_see_each_new_epoch(packed: Path) -> None:
    stream = pack.IterableDataset(packed, batch_size=BATCH, seed=1)
    loader = _loader(stream, 2, persistent_workers=True)
    epochs = [[x for batch in loader for x in batch] for _ in range(3)]
    assert all(sorted(e) == sorted(epochs[0]) for e in epochs)
    assert epochs[0] != epochs[1] != epochs[2]
    assert epochs[0] == [
        x
        for batch in _loader(pack.IterableDataset(packed, batch_size=BATCH, seed=1), 0)
        for x in batch
    ]


@pytest.mark.slow
def test_spawned_workers_get_the_dataset_by_pickling(packed: Path) -> None:
    stream = pack.IterableDataset(packed, batch_size=BATCH, seed=2, shuffle=False)
    stream.set_epoch(4)
    got = [x for b in _loader(stream, 1, multiprocessing_context="spawn") for x in b]
    assert got == [pack.Dataset(packed)[i][0] for i in range(120)]


def _decode(data: bytes) -> torch.Tensor:
    with Image.open(io.BytesIO(data)) as image:
        return torch.tensor(image.convert("L").resize((16, 16)).getdata(), dtype=torch.uint8)


def test_map_style_dataset_with_transform_and_shuffling_loader(packed: Path) -> None:
    dataset = pack.Dataset(packed, transform=_decode)
    loader = DataLoader(dataset, batch_size=16, shuffle=True, num_workers=2)
    labels = torch.cat([lb for _, lb in loader])
    images = next(iter(loader))[0]
    assert images.shape == (16, 256) and images.dtype == torch.uint8
    assert sorted(labels.tolist()) == sorted(dataset.index.labels.tolist())
    assert dataset.label_map == {"class_0": 0, "class_1": 1, "class_2": 2}
    assert dataset.name(0).startswith("class_")

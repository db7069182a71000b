"""dlrig.pack's fast reading paths on a real pack and the real page cache: zero-copy views and
their lifetime, batch reads, cold-batch advice, the readahead thread, and the readahead
units the stream computes from the reading order."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from dlrig import pack
from dlrig.bench.pack_cache import drop_cache, resident_fraction
from dlrig.pack import readahead
from dlrig.pack.stream import Stream
from tests.unit.test_pack_trees import make_tree

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


@pytest.fixture(scope="module")
def packed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("packread")
    # 96 small JPEGs and 8 of 320 px (~30-60 kB: samples span several pages).
    make_tree(root / "src", classes=3, per_class=32, big=8)
    pack.pack(root / "src", root / "dst", pack.PackOptions(shard_bytes=60_000, jobs=2))
    return root / "dst"


def _shard_files(dst: Path) -> list[str]:
    return sorted(str(p) for p in (dst / "shards").glob("*.bin"))


def _cold_or_skip(files: list[str]) -> None:
    drop_cache(files)
    if resident_fraction(files) > 0.01:
        pytest.skip("this filesystem keeps its pages (tmpfs?): cannot make the pack cold here")


def _readahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "dlrig-pack-readahead"]


def test_views_and_batches_give_the_same_bytes_as_get(packed: Path) -> None:
    reader = pack.PackReader(pack.PackIndex(packed))
    samples = list(range(len(reader.index)))
    copies = [reader.get(s) for s in samples]
    assert all(isinstance(c, bytes) for c in copies)
    views = [reader.view(s) for s in samples]
    assert all(isinstance(v, memoryview) and v.readonly for v in views)
    assert [bytes(v) for v in views] == copies
    shuffled = samples[::-1]
    assert reader.get_many(shuffled) == [copies[s] for s in shuffled]
    assert [bytes(v) for v in reader.view_many(shuffled)] == [copies[s] for s in shuffled]
    assert reader.get_many([]) == [] and reader.view_many([]) == []


def test_a_view_outlives_eviction_and_close(packed: Path) -> None:
    """A view keeps its shard mapped: evicting that shard (open-file budget) or closing the
    reader never unmaps memory a view still points at."""
    reader = pack.PackReader(pack.PackIndex(packed))
    index = reader.index
    assert len(index.shards) >= 3
    first = index.shards[0].first_sample
    expected = reader.get(first)
    kept = reader.view(first)
    reader._budget = 1  # one shard mapped at a time: the next shard evicts the first
    other = index.shards[1].first_sample
    assert reader.get(other) == bytes(reader.view(other))
    assert reader._maps[0] is None  # evicted from the reader...
    assert bytes(kept) == expected  # ...but the view still reads the same bytes
    reader.close()
    assert bytes(kept) == expected
    assert reader.get(first) == expected  # a closed reader maps again on demand
    reader.close()


def test_dataset_views_and_getitems_under_real_dataloader_workers(packed: Path) -> None:
    copies = pack.Dataset(packed)
    expected = {copies[i][0]: copies[i][1] for i in range(len(copies))}

    def first_bytes(data: memoryview) -> bytes:
        assert isinstance(data, memoryview)
        return bytes(data[:64]) + len(data).to_bytes(4, "little")

    views = pack.Dataset(packed, transform=first_bytes, views=True)
    loader = DataLoader(
        views, batch_size=16, shuffle=True, num_workers=2, collate_fn=lambda batch: batch
    )
    seen = [item for batch in loader for item in batch]
    assert len(seen) == len(copies)
    wanted = sorted((d[:64] + len(d).to_bytes(4, "little"), lb) for d, lb in expected.items())
    assert sorted(seen) == wanted
    # __getitems__ without a transform: the DataLoader's own batch path, bytes by default.
    batch = copies.__getitems__([3, 1, 2])
    assert batch == [copies[3], copies[1], copies[2]]
    assert all(isinstance(data, bytes) for data, _ in batch)


def test_iterable_views_read_the_same_order_as_bytes(packed: Path) -> None:
    def stream(views: bool, transform: Callable[[object], object] | None) -> pack.IterableDataset:
        return pack.IterableDataset(packed, batch_size=8, seed=3, views=views, transform=transform)

    plain = [x for batch in DataLoader(stream(False, None), batch_size=8) for x in batch[0]]
    as_bytes = [
        x
        for batch in DataLoader(stream(True, bytes), batch_size=8, num_workers=2)
        for x in batch[0]
    ]
    assert as_bytes == plain
    no_readahead = pack.IterableDataset(packed, batch_size=8, seed=3, readahead=False)
    assert [x for batch in DataLoader(no_readahead, batch_size=8) for x in batch[0]] == plain


def test_a_cold_batch_is_advised_and_read_into_the_cache(packed: Path) -> None:
    files = _shard_files(packed)
    _cold_or_skip(files)
    reader = pack.PackReader(pack.PackIndex(packed))
    everything = list(range(len(reader.index)))
    reader.will_read(everything)  # probes find it cold: the whole batch is advised
    deadline = time.monotonic() + 10
    while resident_fraction(files) < 0.9 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert resident_fraction(files) >= 0.9
    reader.close()


def test_residency_probes_see_the_page_cache(packed: Path) -> None:
    path = _shard_files(packed)[0]
    _cold_or_skip([path])
    fd = os.open(path, os.O_RDONLY)
    try:
        probe = readahead.cached(fd, 0)
        if probe is None:
            pytest.skip("no RWF_NOWAIT for buffered reads here")
        assert probe is False
        # A NOWAIT miss still starts the kernel's readahead of that page (only IOCB_NOIO
        # does not), so the probe itself may have brought the file in: make it cold again,
        # once that read has landed (pages under I/O are locked and not dropped, and a read still
        # in flight can land after a drop that looked complete): cold means cold on two looks
        # 50 ms apart, within 10 s.
        for _ in range(200):
            drop_cache([path])
            if resident_fraction([path]) <= 0.01:
                time.sleep(0.05)
                if resident_fraction([path]) <= 0.01:
                    break
            time.sleep(0.01)
        assert not readahead.looks_cached(fd, 0, os.fstat(fd).st_size)
        os.pread(fd, os.fstat(fd).st_size, 0)
        assert readahead.cached(fd, 0) is True
        assert readahead.looks_cached(fd, 0, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def test_the_stream_reads_ahead_cold_and_leaves_no_thread_behind(packed: Path) -> None:
    files = _shard_files(packed)
    index = pack.PackIndex(packed)
    stream = Stream(index, batch_size=4, shuffle=True, seed=1, shuffle_window=16)
    _cold_or_skip(files)
    got = list(stream.samples(0))
    assert len(got) == len(index)
    assert resident_fraction(files) >= 0.99  # every unit was read through the cache
    assert not _readahead_threads()
    # Leaving early (a loader stopped mid-epoch) stops the thread too. Whether the thread is
    # still reading after the first sample depends on the disk (a small set is read whole at
    # once), so the check is that none is left, whatever it was doing.
    iterator = stream.samples(0)
    next(iterator)
    iterator.close()
    assert not _readahead_threads()
    stream.reader.close()


def test_a_readahead_held_at_its_window_stops_when_told(packed: Path) -> None:
    """The thread waits at `ahead` units past the consumer; stop() ends it there, and a
    consumer that entered a unit finds it read (deterministic: nothing depends on timing)."""
    files = _shard_files(packed)
    read: list[int] = []

    def ranges(unit: int) -> list[readahead.Range]:
        read.append(unit)
        return [(0, 0, min(4096, os.path.getsize(files[0])))]

    thread = readahead.Readahead(lambda shard: Path(files[shard]), ranges, units=10, ahead=1)
    thread.enter(1)  # returns once unit 1 is read; the thread may go on to unit 2, no further
    assert read[:2] == [0, 1]
    assert _readahead_threads()
    thread.stop()
    assert not _readahead_threads()
    assert max(read) <= 2


@pytest.mark.parametrize(("shuffle", "window", "rank", "world"), [(True, 16, 0, 1), (True, 7, 1, 2),
                                                                   (False, 16, 1, 3)])  # fmt: skip
def test_readahead_units_cover_exactly_what_each_unit_reads(
    packed: Path, shuffle: bool, window: int, rank: int, world: int
) -> None:
    index = pack.PackIndex(packed)
    stream = Stream(
        index, shuffle=shuffle, seed=4, shuffle_window=window, rank=rank, world_size=world
    )
    sequence = stream.sequence(2)
    step, ranges = stream._units(2, len(sequence))
    for unit in range(-(-len(sequence) // step)):
        wanted: dict[int, tuple[int, int]] = {}
        for sample in sequence[unit * step : (unit + 1) * step]:
            shard = index.shard_of[sample]
            low, high = wanted.get(shard, (1 << 62, -1))
            wanted[shard] = (min(low, index.starts[sample]), max(high, index.ends[sample]))
        covered: dict[int, tuple[int, int]] = {}
        for shard, low, high in ranges(unit):
            old_low, old_high = covered.get(shard, (1 << 62, -1))
            covered[shard] = (min(old_low, low), max(old_high, high))
        assert covered == wanted, unit


def test_map_dataset_reads_in_batches_with_a_plain_dataloader(packed: Path) -> None:
    dataset = pack.Dataset(packed)
    calls: list[int] = []
    original = dataset.reader.get_many

    def counting(samples: list[int]) -> list[bytes]:
        calls.append(len(samples))
        return original(samples)

    dataset.reader.get_many = counting  # type: ignore[method-assign]
    loader = DataLoader(dataset, batch_size=10, collate_fn=lambda batch: batch)
    total = sum(len(batch) for batch in loader)
    assert total == len(dataset) and calls and max(calls) == 10  # torch used __getitems__


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All samples in one shard (~0.5 MB): a batch of neighbours is one run long enough to be
    read through rather than advised."""
    root = tmp_path_factory.mktemp("packrun")
    make_tree(root / "src", classes=2, per_class=16, big=12, seed=5)
    pack.pack(root / "src", root / "dst", pack.PackOptions(shard_bytes=64 << 20, jobs=1))
    return root / "dst"


def test_merged_ranges_join_what_nearly_touches_and_keep_the_rest() -> None:
    from dlrig.pack.reader import _GAP_BYTES, _merged

    ranges = [(9000, 9100), (0, 100), (100, 200), (200 + _GAP_BYTES, 300 + _GAP_BYTES)]
    ranges += [(1 << 30, (1 << 30) + 5), (50, 150)]
    assert list(_merged(ranges)) == [(0, 300 + _GAP_BYTES), (1 << 30, (1 << 30) + 5)]
    assert list(_merged([(10, 20)])) == [(10, 20)]


def test_fill_reads_a_cold_range_into_the_cache_before_it_returns(one_shard: Path) -> None:
    path = _shard_files(one_shard)[0]
    size = os.path.getsize(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        for sink in (-1, None):  # sendfile to /dev/null, then the preadv fallback
            readahead._Sink.fd = sink
            _cold_or_skip([path])
            assert readahead.fill(fd, 5000, size)
            assert resident_fraction([path]) >= 0.97  # all but the first page, at once
            _cold_or_skip([path])
            assert not readahead.fill(fd, 0, size, stopped=lambda: True)
            assert resident_fraction([path]) <= 0.01
    finally:
        readahead._Sink.fd = -1
        os.close(fd)


@pytest.mark.parametrize("order", ["contiguous", "scattered"])
def test_a_cold_batch_reads_exactly_each_samples_bytes(one_shard: Path, order: str) -> None:
    files = _shard_files(one_shard)
    reader = pack.PackReader(pack.PackIndex(one_shard))
    samples = list(range(len(reader.index)))
    copies = [reader.get(s) for s in samples]
    reader.close()
    batch = samples if order == "contiguous" else samples[::-3] + samples[1::3]
    assert (reader.ends[batch[0]] - reader.starts[batch[0]]) > 0
    _cold_or_skip(files)
    got = reader.get_many(batch)
    if order == "contiguous":  # one run past _READ_RUN_BYTES: read through, synchronously
        assert resident_fraction(files) >= 0.97
    assert got == [copies[s] for s in batch]
    assert all(type(data) is bytes for data in got)
    reader.close()
    _cold_or_skip(files)
    assert [bytes(v) for v in reader.view_many(batch)] == [copies[s] for s in batch]
    reader.close()


def test_a_truncated_shard_is_an_error_not_empty_samples(tmp_path: Path) -> None:
    # issue 30: a sample of a truncated shard read back as b"" (verify caught it; a training
    # run would not have)
    from dlrig.errors import InputError

    make_tree(tmp_path / "src", classes=2, per_class=4, seed=3)
    pack.pack(tmp_path / "src", tmp_path / "dst", pack.PackOptions(shard_bytes=64 << 20, jobs=1))
    (shard,) = _shard_files(tmp_path / "dst")
    size = os.path.getsize(shard)
    os.truncate(shard, size // 2)
    reader = pack.PackReader(pack.PackIndex(tmp_path / "dst"))
    with pytest.raises(InputError, match="truncated"):
        reader.get(len(reader.starts) - 1)

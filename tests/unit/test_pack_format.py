"""dlrig pack: the index format, the plan, the reading order, the sources, the writer's
output read back byte for byte."""

from __future__ import annotations

import json
import zlib
from collections import Counter
from pathlib import Path

import pytest

from dlrig import pack
from dlrig.errors import InputError
from dlrig.pack import format as fmt
from dlrig.pack import order, plan
from dlrig.pack.sources import open_source
from tests.unit.test_pack_trees import make_tree


def test_index_round_trip_and_damage_is_refused() -> None:
    index = fmt.ShardIndex()
    for number, data in enumerate([b"abc", b"", b"\xff" * 5000]):
        index.add(len(data), number - 1, zlib.crc32(data), f"dir/ünï {number}.jpg")
    index.extra["skipped"] = [{"name": "x", "error": "gone"}]
    raw = index.encode()
    back = fmt.decode_index(raw)
    assert list(back.offsets) == [0, 3, 3, 5003]
    assert list(back.labels) == [-1, 0, 1]
    assert back.name(1) == "dir/ünï 1.jpg" and back.extra == index.extra
    with pytest.raises(fmt.BadIndex):
        fmt.decode_index(raw[:-1])
    with pytest.raises(fmt.BadIndex):
        fmt.decode_index(b"NOTANIDX" + raw[8:])


def test_read_index_without_names_reads_the_same_numbers(tmp_path: Path) -> None:
    index = fmt.ShardIndex()
    for number in range(100):
        index.add(number, number % 7, number * 3, f"n{number}")
    path = tmp_path / "s.idx"
    path.write_bytes(index.encode())
    light = fmt.read_index(path, names=False)
    assert light.offsets == index.offsets and light.crcs == index.crcs
    path.write_bytes(index.encode()[:-3])
    with pytest.raises(fmt.BadIndex):
        fmt.read_index(path, names=False)


def test_storage_kinds_come_from_the_knowledge_table(tmp_path: Path) -> None:
    assert plan.storage_kind("nfs4") == "network"
    assert plan.storage_kind("fuse.juicefs") == "network"
    assert plan.storage_kind("lustre") == "network"
    assert plan.storage_kind("xfs") == "local"
    assert plan.storage_kind("tmpfs") == "memory"
    assert plan.storage_kind(None) == "unknown"
    here = plan.default_shard_size(tmp_path)  # this machine's real /proc/mounts
    assert here.fstype is not None and here.bytes >= 32 << 20


@pytest.mark.parametrize(
    ("total", "world", "drop"), [(301, 2, False), (301, 2, True), (50, 3, False)]
)
def test_every_rank_and_worker_reads_disjoint_samples(total: int, world: int, drop: bool) -> None:
    counts = [40] * (total // 40) + ([total % 40] if total % 40 else [])
    firsts = [sum(counts[:i]) for i in range(len(counts))]
    seen: Counter[int] = Counter()
    for rank in range(world):
        spec = order.EpochSpec(7, 3, True, rank, world, drop, 16)
        sequence = order.rank_sequence(counts, firsts, spec)
        for worker in range(4):
            seen.update(sequence[p] for p in order.worker_positions(len(sequence), 0, 5, worker, 4))
    assert max(seen.values()) == 1
    if drop:
        assert sum(seen.values()) == world * (total // world)
    else:
        assert sorted(seen) == list(range(total))


def test_order_is_a_function_of_seed_and_epoch() -> None:
    counts, firsts = [30, 30, 30], [0, 30, 60]
    one = order.rank_sequence(counts, firsts, order.EpochSpec(1, 0, True, 0, 1, False, 10))
    again = order.rank_sequence(counts, firsts, order.EpochSpec(1, 0, True, 0, 1, False, 10))
    other = order.rank_sequence(counts, firsts, order.EpochSpec(1, 1, True, 0, 1, False, 10))
    plain = order.rank_sequence(counts, firsts, order.EpochSpec(1, 0, False, 0, 1, False, 10))
    assert one == again and one != other and sorted(one) == sorted(other)
    assert list(plain) == list(range(90))


def test_pack_round_trips_every_file_byte_for_byte(tmp_path: Path) -> None:
    files = make_tree(tmp_path / "src", classes=3, per_class=20)
    report = pack.pack(
        tmp_path / "src", tmp_path / "dst", pack.PackOptions(shard_bytes=20_000, jobs=2)
    )
    assert report.samples == len(files) and report.shards > 3
    index = pack.PackIndex(tmp_path / "dst")
    reader = pack.PackReader(index)
    labels = index.label_map
    assert labels == {"class_0": 0, "class_1": 1, "class_2": 2}
    by_name = {index.name(n): n for n in range(len(index))}
    for path in files:
        name = str(path.relative_to(tmp_path / "src"))
        number = by_name[name]
        assert reader.get(number) == path.read_bytes()
        assert index.labels[number] == labels[path.parent.name]
    manifest = json.loads((tmp_path / "dst" / "manifest.json").read_text())
    assert manifest["samples"] == len(files) and manifest["order"] == {"shuffled": True, "seed": 0}
    assert not (tmp_path / "dst" / fmt.PLAN).exists()
    assert pack.verify(tmp_path / "dst").ok


def test_same_source_and_seed_give_identical_shards(tmp_path: Path) -> None:
    make_tree(tmp_path / "src", classes=2, per_class=15)
    options = pack.PackOptions(shard_bytes=15_000, jobs=2)
    pack.pack(tmp_path / "src", tmp_path / "a", options)
    pack.pack(tmp_path / "src", tmp_path / "b", pack.PackOptions(shard_bytes=15_000, jobs=1))
    for path in sorted((tmp_path / "a" / "shards").iterdir()):
        assert path.read_bytes() == (tmp_path / "b" / "shards" / path.name).read_bytes()


def test_csv_and_jsonl_listings(tmp_path: Path) -> None:
    files = make_tree(tmp_path / "img", classes=2, per_class=4)
    rows = [(str(p.relative_to(tmp_path)), p.parent.name) for p in files]
    (tmp_path / "list.csv").write_text("label,path\n" + "".join(f"{lb},{p}\n" for p, lb in rows))
    (tmp_path / "list.jsonl").write_text(
        "".join(json.dumps({"file": str(tmp_path / p), "class": 5}) + "\n" for p, _ in rows)
    )
    csv_source = open_source(str(tmp_path / "list.csv"))
    assert csv_source.label_map == {"class_0": 0, "class_1": 1} and len(csv_source) == 8
    assert csv_source.get(0)[0] == files[0].read_bytes()
    jsonl = open_source(str(tmp_path / "list.jsonl"))
    assert jsonl.label_map is None and set(jsonl.labels) == {5}
    (tmp_path / "bad.csv").write_text("name,label\na,1\n")
    with pytest.raises(InputError, match="no path column"):
        open_source(str(tmp_path / "bad.csv"))


def test_not_a_dataset_says_what_it_found(tmp_path: Path) -> None:
    (tmp_path / "code" / "pkg").mkdir(parents=True)
    (tmp_path / "code" / "pkg" / "a.py").write_text("x = 1\n")
    (tmp_path / "code" / "README.txt").write_text("hi\n")
    with pytest.raises(InputError, match=r"none of its 1 subfolders .* \(found \.py ×1\)"):
        open_source(str(tmp_path / "code"))
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "a.jpg").write_bytes(b"x")
    with pytest.raises(InputError, match="it has no class subfolders"):
        open_source(str(tmp_path / "flat"))
    assert len(open_source(str(tmp_path / "code"), extensions=None)) == 1

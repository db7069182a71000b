"""Two real torch.distributed (gloo) ranks, four DataLoader workers each, one pack: every
sample read exactly once per epoch, ranks told apart by torch.distributed itself."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from dlrig import pack
from tests.conftest import ROOT
from tests.unit.test_pack_trees import make_tree

pytestmark = pytest.mark.integration

RANK_SCRIPT = r"""
import json, sys, zlib
import torch.distributed as dist
from torch.utils.data import DataLoader
from dlrig.pack import IterableDataset, StatefulLoader

rank, port, dst, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
stream = IterableDataset(dst, batch_size=4, seed=11, drop_last=bool(int(sys.argv[5])))
loader = StatefulLoader(stream, num_workers=4, collate_fn=lambda b: [zlib.crc32(x) for x, _ in b])
epochs = []
for _ in range(2):
    epochs.append([c for batch in loader for c in batch])
gathered = [None, None]
dist.all_gather_object(gathered, {"rank": stream.rank, "epochs": epochs})
if rank == 0:
    open(out, "w").write(json.dumps(gathered))
dist.destroy_process_group()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_ranks(dst: Path, out: Path, drop_last: bool) -> list[dict[str, object]]:
    port = str(_free_port())
    ranks = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                RANK_SCRIPT,
                str(r),
                port,
                str(dst),
                str(out),
                str(int(drop_last)),
            ],
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    try:
        for process in ranks:
            _, err = process.communicate(timeout=180)
            assert process.returncode == 0, err
    finally:
        for process in ranks:
            if process.poll() is None:
                process.kill()
    return json.loads(out.read_text())  # type: ignore[no-any-return]


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
def test_two_gloo_ranks_with_four_workers_read_each_sample_once(tmp_path: Path) -> None:
    make_tree(tmp_path / "src", classes=3, per_class=33)  # 99 samples: ranks of 49 and 50
    dst = tmp_path / "dst"
    pack.pack(tmp_path / "src", dst, pack.PackOptions(shard_bytes=20_000, jobs=2))
    everything = sorted(zlib.crc32(pack.Dataset(dst)[i][0]) for i in range(99))
    result = _run_ranks(dst, tmp_path / "out.json", drop_last=False)
    assert [r["rank"] for r in result] == [0, 1]
    for epoch in range(2):
        union = [c for r in result for c in r["epochs"][epoch]]  # type: ignore[index]
        assert sorted(union) == everything  # each sample once, none missing
    assert result[0]["epochs"][0] != result[0]["epochs"][1]  # type: ignore[index]
    even = _run_ranks(dst, tmp_path / "even.json", drop_last=True)
    lengths = {len(r["epochs"][e]) for r in even for e in range(2)}  # type: ignore[index]
    assert lengths == {49}
    for epoch in range(2):
        union = [c for r in even for c in r["epochs"][epoch]]  # type: ignore[index]
        assert len(set(union)) == len(union) == 98

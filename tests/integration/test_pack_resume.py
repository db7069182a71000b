"""The real `dlrig pack` process killed with SIGKILL mid-way, resumed, verified; a flipped
byte found by `verify` with the sample's name."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.unit.test_pack_trees import make_tree

pytestmark = pytest.mark.integration


def _dlrig(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlrig.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def _wait_for(condition, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_sigkilled_pack_resumes_to_the_same_bytes_and_verifies(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tree(src, classes=3, per_class=60)
    # A FIFO among the files: opening it blocks until someone writes to it, so the packer is
    # stuck inside one shard while the others finish — a kill mid-way, every time.
    blocker = src / "class_1" / "img_030.jpg"
    real = blocker.read_bytes()
    blocker.unlink()
    os.mkfifo(blocker)
    dst = tmp_path / "dst"
    args = ["pack", str(src), str(dst), "--shard-size", "40k", "--jobs", "2"]
    packer = subprocess.Popen(
        [sys.executable, "-m", "dlrig.cli.main", *args],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        plan = json.loads(_read_when_there(dst / ".dlrig-pack-plan.json"))
        shards = -(-plan["total"] // plan["samples_per_shard"])
        _wait_for(lambda: len(list((dst / "shards").glob("*.idx"))) >= shards - 1)
        time.sleep(0.3)  # let the blocked shard's worker sit in its partial file
        assert packer.poll() is None, packer.stderr.read() if packer.stderr else ""
        assert list((dst / "shards").glob("*.bin.tmp"))  # the partial shard, mid-write
        packer.send_signal(signal.SIGKILL)
        packer.wait(timeout=10)
    finally:
        if packer.poll() is None:
            packer.kill()
    assert not (dst / "manifest.json").exists()
    kept = {p.name: p.stat().st_mtime_ns for p in (dst / "shards").glob("*.idx")}
    assert len(kept) == shards - 1
    blocker.unlink()
    blocker.write_bytes(real)
    resumed = _dlrig(*args, "--json")
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["resumed_shards"] == shards - 1 and report["samples"] == 180
    for name, mtime in kept.items():  # finished shards kept, not rewritten
        assert (dst / "shards" / name).stat().st_mtime_ns == mtime
    assert not list((dst / "shards").glob("*.tmp"))
    fresh = _dlrig("pack", str(src), str(tmp_path / "fresh"), "--shard-size", "40k")
    assert fresh.returncode == 0, fresh.stderr
    for path in sorted((dst / "shards").iterdir()):
        assert path.read_bytes() == (tmp_path / "fresh" / "shards" / path.name).read_bytes()
    verified = _dlrig("pack", "verify", str(dst))
    assert verified.returncode == 0 and "intact" in verified.stdout, verified.stdout


def _read_when_there(path: Path) -> str:
    _wait_for(path.exists)
    return path.read_text()


def test_verify_names_the_sample_behind_a_flipped_byte(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tree(src, classes=2, per_class=30)
    dst = tmp_path / "dst"
    assert _dlrig("pack", str(src), str(dst), "--shard-size", "30k").returncode == 0
    from dlrig import pack

    index = pack.PackIndex(dst)
    victim = 17
    shard = index.shards[index.shard_of[victim]]
    data_file = dst / "shards" / f"{shard.name}.bin"
    raw = bytearray(data_file.read_bytes())
    at = index.starts[victim] + (index.ends[victim] - index.starts[victim]) // 2
    raw[at] ^= 0x01
    data_file.write_bytes(bytes(raw))
    result = _dlrig("pack", "verify", str(dst), "--json")
    assert result.returncode == 1, result.stderr
    damaged = json.loads(result.stdout)["damaged"]
    assert damaged == [
        {
            "shard": shard.name,
            "sample": victim,
            "name": index.name(victim),
            "problem": "checksum mismatch (damaged bytes)",
        }
    ]
    text = _dlrig("pack", "verify", str(dst))
    assert text.returncode == 1 and index.name(victim) in text.stdout
    # A data file cut short: every sample past the cut is named.
    data_file.write_bytes(bytes(raw[: index.starts[victim]]))
    cut = json.loads(_dlrig("pack", "verify", str(dst), "--json").stdout)["damaged"]
    names = {d["name"] for d in cut if d["name"]}
    assert index.name(victim) in names and any("cut short" in d["problem"] for d in cut)

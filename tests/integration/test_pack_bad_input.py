"""`dlrig pack` on bad input, in real processes: an unreadable file, a full disk (a real tmpfs
run out of inodes, and a real file-size limit), a destination that exists, a folder that is
not a dataset, a user Dataset that returns the wrong thing."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.unit.test_pack_trees import jpeg_bytes, make_tree

pytestmark = pytest.mark.integration


def _dlrig(*args: str, file_limit: int | None = None) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        # As `ulimit -f` does: the kernel fails writes past the limit with EFBIG (and would send
        # SIGXFSZ, which a shell's `ulimit` user sees ignored only if dlrig ignores it).
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        if file_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))

    return subprocess.run(
        [sys.executable, "-m", "dlrig.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        preexec_fn=limit,
    )


def _one_line(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def _nothing_half_claimed(dst: Path) -> None:
    """Every shard with an index has a whole data file; no partial file is left."""
    from dlrig.pack.format import read_index

    shards = dst / "shards"
    assert not (dst / "manifest.json").exists()
    assert not list(shards.glob("*.tmp"))
    for index_path in shards.glob("*.idx"):
        index = read_index(index_path, names=False)
        assert index_path.with_suffix(".bin").stat().st_size == index.data_bytes


def test_unreadable_file_stops_with_its_path_or_is_skipped(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tree(src, classes=2, per_class=20)
    broken = src / "class_1" / "img_007.jpg"
    broken.unlink()
    broken.symlink_to(tmp_path / "gone.jpg")  # listed like a file, cannot be opened
    line = _one_line(_dlrig("pack", str(src), str(tmp_path / "a"), "--shard-size", "20k"))
    assert str(broken) in line and "No such file or directory" in line and "--skip-bad" in line
    _nothing_half_claimed(tmp_path / "a")
    result = _dlrig("pack", "--skip-bad", "--json", str(src), str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["samples"] == 39
    assert [s["name"] for s in report["skipped"]] == [str(broken)]
    assert _dlrig("pack", "verify", str(tmp_path / "b")).returncode == 0


def test_file_size_limit_is_a_clean_stop_and_the_rerun_finishes(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tree(src, classes=2, per_class=30, big=2)  # two ~100 kB images among ~3 kB ones
    dst = tmp_path / "dst"
    args = ["pack", str(src), str(dst), "--shard-size", "30k", "--jobs", "1"]
    line = _one_line(_dlrig(*args, file_limit=90_000))
    assert "the disk is full" in line and "File too large" in line and "resume" in line
    _nothing_half_claimed(dst)
    assert list((dst / "shards").glob("*.idx"))  # some shards finished before the stop
    assert _dlrig(*args).returncode == 0
    assert _dlrig("pack", "verify", str(dst)).returncode == 0


@contextlib.contextmanager
def _tiny_tmpfs(tmp_path: Path, options: str) -> Iterator[Path]:
    mount = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_full_tmpfs_mid_way_is_a_clean_stop(tmp_path: Path) -> None:
    src = tmp_path / "src"
    make_tree(src, classes=2, per_class=40)
    # Room for the bytes but only a few files: the disk fills (ENOSPC) a few shards in.
    with _tiny_tmpfs(tmp_path, "size=64m,nr_inodes=12") as mount:
        dst = mount / "dst"
        line = _one_line(_dlrig("pack", str(src), str(dst), "--shard-size", "10k", "--jobs", "1"))
        assert "the disk is full (No space left on device" in line
        _nothing_half_claimed(dst)
    with _tiny_tmpfs(tmp_path, "size=100k") as mount:
        line = _one_line(_dlrig("pack", str(src), str(mount / "dst")))
        assert "not enough free space" in line


def test_existing_destination_needs_overwrite_and_foreign_folders_are_never_deleted(
    tmp_path: Path,
) -> None:
    src = tmp_path / "src"
    make_tree(src, classes=2, per_class=5)
    dst = tmp_path / "dst"
    assert _dlrig("pack", str(src), str(dst)).returncode == 0
    line = _one_line(_dlrig("pack", str(src), str(dst)))
    assert "already holds a packed dataset" in line and "--overwrite" in line
    assert _dlrig("pack", str(src), str(dst), "--overwrite").returncode == 0
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("do not delete")
    line = _one_line(_dlrig("pack", str(src), str(foreign), "--overwrite"))
    assert "not a dlrig pack" in line and "thesis.tex" in line
    assert (foreign / "thesis.tex").read_text() == "do not delete"
    line = _one_line(_dlrig("pack", str(tmp_path / "nowhere"), str(tmp_path / "x")))
    assert "no such file or directory" in line


def test_a_folder_that_is_not_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "notes" / "2024").mkdir(parents=True)
    (tmp_path / "notes" / "2024" / "todo.txt").write_text("x")
    line = _one_line(_dlrig("pack", str(tmp_path / "notes"), str(tmp_path / "dst")))
    assert "not a dataset" in line and ".txt ×1" in line
    (tmp_path / "list.txt").write_text("a.jpg 1\n")
    line = _one_line(_dlrig("pack", str(tmp_path / "list.txt"), str(tmp_path / "dst")))
    assert "not a dataset (a .txt file)" in line


# A user's Dataset, for `dlrig pack tests.integration.test_pack_bad_input:make_...`.
class _Jpegs:
    def __init__(self, good: bool) -> None:
        import numpy as np

        self.good = good
        self.items = [jpeg_bytes(np.random.default_rng(i), 40, 30) for i in range(12)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> object:
        return (self.items[index], index % 3) if self.good else ({"image": 1}, 0)


def make_jpegs() -> _Jpegs:
    return _Jpegs(True)


def make_wrong() -> _Jpegs:
    return _Jpegs(False)


def test_a_factory_dataset_packs_and_a_wrong_one_is_named(tmp_path: Path) -> None:
    target = "tests.integration.test_pack_bad_input"
    result = _dlrig("pack", f"{target}:make_jpegs", str(tmp_path / "a"), "--json", "--jobs", "2")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["samples"] == 12
    from dlrig import pack

    reader = pack.PackReader(pack.PackIndex(tmp_path / "a"))
    assert sorted(reader.get(i) for i in range(12)) == sorted(make_jpegs().items)
    line = _one_line(_dlrig("pack", f"{target}:make_wrong", str(tmp_path / "b")))
    assert "the Dataset returned dict, not bytes" in line

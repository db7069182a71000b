"""`dlrig fit` and `dlrig plan` keep traced steps in the user's cache: asked again, they load
the stored basis instead of tracing, and give the same answer. A cache that cannot be written
is no error."""

from __future__ import annotations

import json
import os
import stat

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from dlrig.fit import cache

ARGS = ["fit", "gpt2", "--gpu", "t4", "--batch-size", "2", "--seq-len", "256", "--json"]


def _cached(run_dlrig, where, *args):
    result = run_dlrig(*args, env={"DLRIG_NO_CACHE": "", "DLRIG_CACHE_DIR": str(where)})
    assert result.returncode in (0, 1), result.stderr
    return json.loads(result.stdout)


def _figures(document):
    return (
        document["fits"],
        document["memory"]["peak_bytes"],
        document["max_batch_size"],
        round(document["step_time_s"], 9),
    )


def test_a_second_fit_reads_the_stored_trace_and_answers_the_same(run_dlrig, tmp_path):
    folder = tmp_path / "cache"
    first = _cached(run_dlrig, folder, *ARGS)
    stored = sorted(folder.glob("*.npz"))
    assert stored, "the first run stores its traced bases"
    mtimes = {p: p.stat().st_mtime_ns for p in stored}
    second = _cached(run_dlrig, folder, *ARGS)
    assert _figures(second) == _figures(first)
    # Nothing was traced again: every stored basis is the one the first run wrote.
    assert {p: p.stat().st_mtime_ns for p in folder.glob("*.npz")} == mtimes


def test_a_cache_that_cannot_be_written_is_no_error(run_dlrig, tmp_path):
    if os.geteuid() == 0:
        # root writes through permissions: a path under a regular file cannot be created.
        blocked = tmp_path / "file"
        blocked.write_text("")
        folder = blocked / "cache"
    else:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    document = _cached(run_dlrig, folder, *ARGS)
    assert document["memory"]["peak_bytes"] > 0


def test_where_the_cache_is():
    assert cache.folder({"DLRIG_NO_CACHE": "1"}) is None
    assert str(cache.folder({"DLRIG_CACHE_DIR": "/x"})) == "/x"
    assert str(cache.folder({"XDG_CACHE_HOME": "/c"})) == "/c/dlrig/fit-traces"


def test_prune_keeps_the_newest(tmp_path):
    for i in range(5):
        path = tmp_path / f"{i}.npz"
        path.write_bytes(b"x")
        os.utime(path, (i, i))
    cache.prune(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.glob("*.npz")) == ["3.npz", "4.npz"]

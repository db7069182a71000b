"""The burn-in's load workers as real processes: they load, report, stop when told, clean up,
and never outlive a dlrig that was killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from dlrig.accept import loads
from dlrig.machine import probe

# Real processes and training steps: the slow tier (make test runs it, make test-fast does not).
pytestmark = pytest.mark.slow

TIMEOUT_S = 120


def _until(condition, what: str) -> None:
    """Wait for something the test can observe; a generous deadline, never a guessed delay."""
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"not within {TIMEOUT_S} s: {what}"
        time.sleep(0.05)


def _reports(load_set: loads.LoadSet, kind: str) -> int:
    return sum(len(t.t) for t in load_set.tracks() if t.kind == kind)


def _gone(pid: int) -> bool:
    """Exited (a zombie waiting for a reaper that is not us counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_cpu_memory_and_disk_workers_report_and_clean_up(tmp_path):
    machine = probe.collect()
    specs, absent = loads.plan(machine, [], tmp_path, 64 * 1024**2, memory_bytes=64 * 1024**2)
    assert [s.kind for s in specs] == ["cpu", "memory", "disk"] and not absent
    load_set = loads.LoadSet(specs, seconds=120, interval=0.25, t0=time.time()).start()
    try:
        load_set.wait_ready(TIMEOUT_S)
        # Three reports of every kind (the disk's first one needs a 16 MiB chunk synced).
        _until(lambda: all(_reports(load_set, s.kind) >= 3 for s in specs), "3 reports each")
        assert load_set.running() == sum(s.workers for s in specs)
    finally:
        load_set.stop()
    tracks = {t.kind: t for t in load_set.tracks()}
    assert all(t.error is None for t in tracks.values()), [t.error for t in tracks.values()]
    assert len(tracks["cpu"].t) >= 3 and min(v for v in tracks["cpu"].column("hash_mb_s") if v) > 0
    assert max(v or 0 for v in tracks["memory"].column("copy_gb_s")) > 0
    disk = tracks["disk"]
    assert max(v or 0 for v in disk.column("write_mb_s")) > 0
    assert not any(disk.column("mismatched_chunks")), "the disk returned other bytes"
    assert disk.detail["file_bytes"] == 64 * 1024**2
    assert not list(tmp_path.iterdir()), "the disk load's file was left behind"
    assert all(_gone(pid) for pid in load_set.pids())


def test_workers_stop_by_themselves_when_dlrig_is_killed(tmp_path):
    """SIGKILL leaves no `finally` to run: each worker notices its parent is gone."""
    script = textwrap.dedent(
        f"""
        import json, sys, time
        from pathlib import Path
        from dlrig.accept import loads
        from dlrig.machine import probe
        specs, _ = loads.plan(probe.collect(), [], Path({str(tmp_path)!r}), 32 * 1024**2,
                              memory_bytes=32 * 1024**2)
        load_set = loads.LoadSet(specs, seconds=600, interval=0.5, t0=time.time()).start()
        load_set.wait_ready(60)
        print(json.dumps(load_set.pids()), flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = json.loads(parent.stdout.readline())
        assert pids and not any(_gone(pid) for pid in pids)
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(10)
    _until(lambda: all(_gone(pid) for pid in pids), "every load worker gone after dlrig")


def test_no_disk_load_where_the_folder_cannot_hold_it(tmp_path):
    machine = probe.collect()
    specs, absent = loads.plan(machine, [], tmp_path / "missing", 64 * 1024**2)
    assert "disk" not in [s.kind for s in specs]
    assert absent[0].part == "disk" and "missing" in absent[0].reason


def test_a_gpu_load_runs_or_says_why_it_cannot(tmp_path):
    """Here torch is a CPU-only build: the worker says so and exits; where CUDA works, the
    same worker reports the matmul TFLOP/s it reached."""
    from dlrig.accept import host_verdicts

    spec = loads.LoadSpec("gpu", 0, 1, ("--index", "0"))
    load_set = loads.LoadSet([spec], seconds=120, interval=0.5, t0=time.time()).start()
    try:
        load_set.wait_ready(TIMEOUT_S)
        (track,) = load_set.tracks()
        if track.error is None:  # a GPU: wait for its first report
            _until(lambda: _reports(load_set, "gpu") >= 1, "a GPU load report")
    finally:
        load_set.stop()
    (track,) = load_set.tracks()
    if track.error is not None:
        assert "cannot use a GPU" in track.error or "GPU" in track.error, track.error
        verdict = host_verdicts.gpu_load(track)
        assert verdict is not None and verdict.status == "warn" and verdict.gpu == 0
    else:
        assert max(v or 0 for v in track.column("tflops")) > 0
        assert track.detail["dtype"] in ("fp8", "bf16", "fp16", "tf32")

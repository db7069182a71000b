"""`dlrig accept` end to end on the real console script: a short live burn-in on this machine
(CPU, memory, disk; the GPU parts say why they are absent), replayed evidence, bad input, and
stop signals that keep what was recorded."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import NVSMI, ROOT

T4 = str(NVSMI / "tesla-t4-2procs-q-x.xml")
H200 = str(NVSMI / "h200-capture-idle-load.txt")
TIMEOUT_S = 240
# The burn-in's progress line once the load runs: "burn-in: 4 load worker(s), 0:00 of 1:00".
RUNNING = re.compile(r"burn-in: \d+ load worker\(s\), \d+:\d\d of ")


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_a_short_live_acceptance_records_its_history_and_shows_progress(run_dlrig, tmp_path):
    out = tmp_path / "run"
    done = run_dlrig(
        "accept",
        "--level",
        "quick",
        "--minutes",
        "0.1",
        "--skip",
        "bench",
        "--out",
        str(out),
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    assert "burn-in:" in done.stderr and "dlrig accept [" in done.stderr  # progress, in a pipe
    assert "PASS" in done.stdout and "wrote" in done.stdout
    assert str(out / "history.db") in done.stdout.split("wrote", 1)[1]  # every file it wrote
    document = json.loads((out / "accept.json").read_text())
    assert document["schema"] == "dlrig.accept" and document["complete"] is True
    burn = document["burn_in"]
    # The 6 s count from when the load runs (the workers' start-up is not in them).
    assert burn["mode"] == "live" and burn["seconds"] >= 5.75
    # No NVIDIA GPU here: the GPU parts are absent, and the document says why.
    if burn["source"]["kind"] == "none":
        assert any(a["part"] == "gpu" and "NVML" in a["reason"] for a in burn["absent"])
    kinds = {load["kind"]: load for load in burn["loads"]}
    assert {"cpu", "memory", "disk"} <= set(kinds)
    assert all(load["error"] is None and load["points"] >= 3 for load in kinds.values()), [
        (load["kind"], load["error"], load["points"]) for load in kinds.values()
    ]
    verdicts = {v["id"]: v["status"] for v in document["verdicts"]}
    assert verdicts["burn_in.disk"] == "pass", document["verdicts"]
    assert verdicts["burn_in.cpu"] in ("pass", "warn"), document["verdicts"]
    with sqlite3.connect(out / "history.db") as conn:
        host_rows = conn.execute("SELECT COUNT(*) FROM host_samples").fetchone()[0]
    assert host_rows == burn["history_samples"] and host_rows >= 10
    assert burn["host"]["points"] >= 10 and max(burn["host"]["cpu_percent"]) > 50
    assert (out / "report.html").stat().st_size > 10_000
    assert not [p for p in out.iterdir() if p.name.startswith(".dlrig-accept-disk")]


def _host_samples(db: Path) -> int:
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM host_samples").fetchone()[0])
    except sqlite3.Error:  # not created yet, or its first transaction still open
        return 0


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_kills_the_load_and_writes_the_partial_document(tmp_path, signum):
    out = tmp_path / "run"
    env = dict(os.environ)
    env.pop("DLRIG_DEBUG", None)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlrig.cli.main",
            "accept",
            "--level",
            "quick",
            "--minutes",
            "1",
            "--skip",
            "bench",
            "--out",
            str(out),
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    # Whatever stalls, nothing waits past this: the process is killed and the test fails.
    timer = threading.Timer(TIMEOUT_S, process.kill)
    timer.start()
    try:
        seen = []
        assert process.stderr is not None
        for line in process.stderr:  # the progress, one line per stage in a pipe
            seen.append(line)
            if RUNNING.search(line):
                break
        assert any(RUNNING.search(line) for line in seen), "".join(seen)
        # The load runs (every worker reported ready before that line). Two seconds of it and
        # two samples in the history, then the signal.
        loaded = time.monotonic()
        while (
            time.monotonic() - loaded < 2.0 or _host_samples(out / "history.db") < 2
        ) and process.poll() is None:
            time.sleep(0.1)
        process.send_signal(signum)
        stdout, stderr = process.communicate()
    finally:
        timer.cancel()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 128 + signum, "".join(seen) + stderr[-2000:]
    document = json.loads(stdout)
    assert document["complete"] is False and document["stopped_by"] == signal.Signals(signum).name
    assert document["stopped_during"] == "burn-in" and document["result"] == "incomplete"
    saved = json.loads((out / "accept.json").read_text())
    assert saved["stopped_by"] == document["stopped_by"]
    burn = saved["burn_in"]
    assert 2.0 <= burn["seconds"] < 60 and burn["history_samples"] >= 2
    assert burn["load_worker_pids"] and all(_gone(pid) for pid in burn["load_worker_pids"])
    assert not [p for p in out.iterdir() if p.name.startswith(".dlrig-accept-disk")]


def test_replayed_evidence_fails_with_the_problem_first(run_dlrig, tmp_path):
    done = run_dlrig("accept", "--replay", T4, "--out", str(tmp_path), "--json")
    assert done.returncode == 1, done.stderr
    document = json.loads(done.stdout)
    assert list(document)[:2] == ["schema", "schema_version"]
    first = document["summary"]["problems"][0]
    assert first["cause"] == "pcie_link_degraded" and "x8 of x16" in first["title"]
    assert json.loads((tmp_path / "accept.json").read_text())["summary"] == document["summary"]
    assert (tmp_path / "report.html").exists()


def test_options_before_or_after_give_the_same_document(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "DLRIG_DEBUG"}
    both = [  # side by side: two independent runs
        subprocess.Popen(
            [sys.executable, "-m", "dlrig.cli.main", "accept", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=env,
        )
        for args in (
            ["--json", "--out", str(tmp_path / "a"), "--replay", H200],
            ["--replay", H200, "--out", str(tmp_path / "b"), "--json"],
        )
    ]
    (a_out, a_err), (b_out, b_err) = (p.communicate(timeout=TIMEOUT_S) for p in both)
    assert both[0].returncode == both[1].returncode == 0, a_err + b_err
    first, second = json.loads(a_out), json.loads(b_out)
    assert first["summary"] == second["summary"] and first.keys() == second.keys()


@pytest.mark.parametrize(
    "args",
    [
        ["--replay", "/nonexistent/box.xml"],
        ["--replay", T4, "--minutes", "3"],
        ["--minutes", "0"],
        ["--skip", "gpus"],
        ["--gpu-index", "64", "--minutes", "0.1", "--skip", "bench"],
        ["--machine", "/nonexistent/snapshot.json", "--minutes", "0.1", "--skip", "bench"],
    ],
    ids=[
        "missing-replay",
        "replay-with-minutes",
        "zero-minutes",
        "bad-skip",
        "no-such-gpu",
        "missing-machine",
    ],
)
def test_bad_input_is_one_line_and_exit_2(run_dlrig, tmp_path, args):
    done = run_dlrig("accept", *args, "--out", str(tmp_path / "o"))
    assert done.returncode == 2, (done.stdout[-500:], done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "o" / "history.db").exists()


def test_a_path_that_does_not_exist_is_refused_not_created(run_dlrig, tmp_path):
    # issue 30: `accept --path ./typo/dta` created the folder, tested that disk and passed
    typo = tmp_path / "typo" / "dta"
    done = run_dlrig("accept", "--level", "quick", "--minutes", "1", "--path", str(typo))
    assert done.returncode == 2 and "no such directory" in done.stderr
    assert not (tmp_path / "typo").exists()

"""`dlrig bench` from the command line: the JSON document, plots, and bad input."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

PROGRESS = re.compile(r"^dlrig: +\d+% ")


def _one_line_error(result: subprocess.CompletedProcess, code: int = 2) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    # Progress lines (off a terminal, after a second) come before the error; the error is one.
    lines = [line for line in result.stderr.strip().splitlines() if not PROGRESS.match(line)]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_json_document_and_plots(run_dlrig, tmp_path) -> None:
    out = tmp_path / "out"
    result = run_dlrig(
        "bench", "compute", "comms", "storage", "--quick", "--json", "--path", str(tmp_path),
        "--size", "32M", "--random-seconds", "0.3", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "dlrig.bench" and document["schema_version"] == 1
    assert document["machine"]["schema"] == "dlrig.machine"
    keys = {"part", "test", "value", "unit", "expected", "percent", "verdict", "fix"}
    assert all(keys <= set(r) for r in document["results"])
    tests = {(r["part"], r["test"]) for r in document["results"]}
    assert {("compute", "fp32_matmul"), ("comms", "all_reduce"), ("storage", "seq_read")} <= tests
    storage = {r["test"]: r for r in document["results"] if r["part"] == "storage"}
    assert storage["seq_read"]["unit"] == storage["random_read"]["unit"] == "MB/s"
    assert json.loads((out / "bench.json").read_text()) == document
    assert {p.name for p in out.glob("*.png")} == {"compute.png", "comms.png", "storage.png"}
    assert not list(tmp_path.glob(".dlrig-bench-*"))  # the test file is gone


def test_off_a_terminal_progress_is_a_line_per_stage_and_tenth(run_dlrig) -> None:
    # Before, `bench` printed nothing off a terminal until it ended, minutes later.
    result = run_dlrig("bench", "compute", "memory", "--quick", "--json")
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if PROGRESS.match(line)]
    assert lines, result.stderr
    assert len(lines) <= 2 * 11, lines  # each stage, and each tenth of the work, at most once
    assert any(" memory" in line for line in lines), lines
    assert all(line.rstrip().endswith(("s)", "left)")) for line in lines), lines


def test_comms_prints_the_size_table_nccl_tests_users_read(run_dlrig) -> None:
    result = run_dlrig("bench", "comms", "--quick")  # 80 columns: a pipe
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = next((i for i, line in enumerate(lines) if "comms by message size" in line), None)
    assert start is not None, result.stdout
    header = next((line for line in lines[start:] if "busbw GB/s" in line), "")
    assert "time µs" in header and "algbw GB/s" in header, result.stdout
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines[start:]]
    rows = [row for row in rows if len(row) == 5]
    collectives = [row[0] for row in rows if row[0]]
    assert collectives == ["all_reduce", "all_gather", "reduce_scatter", "broadcast"], rows
    # --quick: gloo's largest three sizes for each collective, every figure whole.
    assert [row[1] for row in rows[:3]] == ["2 MiB", "8 MiB", "32 MiB"], rows
    assert all("…" not in cell for row in rows for cell in row), result.stdout
    table = [line for line in lines[start:] if line[:1] in "┏┃┡│├└"]
    assert max(len(line) for line in table) <= 80, result.stdout


def test_text_report_gives_the_dataloader_line(run_dlrig) -> None:
    result = run_dlrig(
        "bench", "dataloader", "--quick", "--dataset", "tests.data.custom_datasets:make_squares",
        "--batch-size", "32",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "dataloader best_settings paste: DataLoader(dataset, batch_size=32" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nonsense"], "no bench part named 'nonsense'"),
        (["storage"], "bench storage needs --path"),
        (["storage", "--path", "/nonexistent/data"], "/nonexistent/data: no such file"),
        (["storage", "--path", ".", "--size", "huge"], "--size 'huge' is not a size"),
        (["comms", "--processes", "1"], "--processes 1: collectives need 2 or more"),
        (
            ["dataloader", "--dataset", "tests.data.custom_datasets:make_raising"],
            "the factory raised FileNotFoundError: /data/imagenet/train: no such directory",
        ),
        (
            ["dataloader", "--dataset", "tests.data.custom_datasets:make_broken", "--quick"],
            "reading a batch failed (KeyError",
        ),
        (["compute", "--device", "cuda"], "--device cuda: torch cannot use a GPU here"),
        (["storage", "--path", ".", "--random-seconds", "nan"], "'nan' is not a finite number"),
        (["storage", "--path", ".", "--size", "infG"], "--size 'infG' is not a size"),
        (["compute", "--out", "README.md"], "--out README.md: is not a directory"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(run_dlrig, args: list[str], message: str) -> None:
    if "cuda" in args:
        torch = pytest.importorskip("torch")
        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    line = _one_line_error(run_dlrig("bench", *args))
    assert message in line and "fix:" in line


def test_no_room_for_the_test_file_leaves_nothing_behind(run_dlrig, tmp_path) -> None:
    line = _one_line_error(run_dlrig("bench", "storage", "--path", str(tmp_path), "--size", "900T"))
    assert "no room for the" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stop_signal_during_storage_removes_the_test_file(tmp_path, signame) -> None:
    import os
    import signal
    import sys
    import time

    from tests.conftest import ROOT

    signum = getattr(signal, signame)

    def ignore_like_a_background_job() -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    process = subprocess.Popen(
        [sys.executable, "-m", "dlrig", "bench", "storage", "--path", str(tmp_path),
         "--size", "2G", "--no-fio"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={k: v for k, v in os.environ.items() if k != "DLRIG_DEBUG"},
        preexec_fn=ignore_like_a_background_job,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".dlrig-bench-*")) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(tmp_path.glob(".dlrig-bench-*")), "the test file never appeared"
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait(timeout=10)
    assert process.returncode == 128 + signum and f"stopped by {signame}" in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compute", "--gpu-index", "3", "--quick"], "--gpu-index 3: torch sees no GPU"),
        (["dataloader", "--dataset", "os:getcwd"], "returned str, not a Dataset"),
        (["storage", "--path", "/proc", "--size", "64M"], "no room for the 64 MiB test file"),
        (["storage", "--path", "/tmp", "--random-seconds", "nan"], "not a finite number"),
    ],
)
def test_options_that_would_do_nothing_are_refused(run_dlrig, args, message) -> None:
    done = run_dlrig("bench", *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert message in done.stderr and "Traceback" not in done.stderr

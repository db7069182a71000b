"""`dlrig profile` through the real console script: traces, -- CMD on a real CPU training
loop (torch.profiler for real), compare, and bad input."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import CORPUS, ROOT

KINETO = CORPUS / "kineto"
LOADER = ROOT / "tests" / "data" / "train_scripts" / "profile_loader.py"
PYTHON = sys.executable  # the venv's: CI's PATH may find another Python without torch
CONTROL = str(KINETO / "hta-trace_diff_control.json.gz")
GZIPPED = (KINETO / "hta-amd_mi250_minitoy_rocm6.2.json.gz").read_bytes()


def _one_line_exit_2(done) -> None:
    assert done.returncode == 2, (done.stdout[-300:], done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr


def test_a_trace_gets_a_report_and_options_go_anywhere(run_dlrig):
    text = run_dlrig("profile", CONTROL)
    assert text.returncode == 0, text.stderr
    assert "Verdict: Communication-bound" in text.stdout
    assert "ncclKernel_SendRecv" in text.stdout
    first, last = run_dlrig("profile", "--json", CONTROL), run_dlrig("profile", CONTROL, "--json")
    a, b = json.loads(first.stdout), json.loads(last.stdout)
    assert a == b and a["schema"] == "dlrig.profile"
    assert a["verdict"]["cause"] == "communication_exposed"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"plain text, not a trace", "not a Kineto trace"),
        (GZIPPED[: len(GZIPPED) // 2], "cut short"),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}]}',
            "no training steps",
        ),
        (b"", "empty"),
    ],
    ids=["text", "truncated-gzip", "no-steps", "empty"],
)
def test_bad_traces_exit_2_with_one_line(run_dlrig, tmp_path, content, said):
    path = tmp_path / "trace.json.gz"
    path.write_bytes(content)
    done = run_dlrig("profile", str(path))
    _one_line_exit_2(done)
    assert said in done.stderr


def test_missing_trace_and_folder_are_exit_2(run_dlrig, tmp_path):
    _one_line_exit_2(run_dlrig("profile", "/nonexistent/trace.json.gz"))
    _one_line_exit_2(run_dlrig("profile", str(tmp_path)))
    _one_line_exit_2(run_dlrig("profile"))


def test_compare_two_runs(run_dlrig, tmp_path):
    saved = tmp_path / "control.json"
    saved.write_text(run_dlrig("profile", "--json", CONTROL).stdout)
    done = run_dlrig(
        "profile", "compare", str(saved), str(KINETO / "hta-trace_diff_test.json.gz"), "--json"
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["schema"] == "dlrig.profile.compare"
    assert document["speedup"] < 1
    text = run_dlrig("profile", "compare", str(saved), CONTROL)
    assert "×1.00" in text.stdout  # the same run read two ways


@pytest.mark.slow
def test_a_command_that_never_steps_is_exit_2_or_its_own_code(run_dlrig_process):
    _one_line_exit_2(run_dlrig_process("profile", "--", PYTHON, "-c", "import torch"))
    failed = run_dlrig_process("profile", "--", PYTHON, "-c", "import sys; sys.exit(5)")
    assert failed.returncode == 5
    assert "before its first profiled step" in failed.stderr
    _one_line_exit_2(run_dlrig_process("profile", "--", "/nonexistent/python"))


@pytest.mark.slow
def test_a_slow_dataloader_is_named_input_bound_and_the_fix_lowers_data_wait(
    run_dlrig_process, tmp_path
):
    """A real CPU training loop under torch.profiler: with num_workers=0 each batch is loaded
    in the step (16 samples x 2 ms), so the step waits for data; with two workers the
    loading overlaps the step and the measured wait falls."""
    slow = run_dlrig_process(
        "profile", "--json", "--out", str(tmp_path / "w0"), "--", PYTHON, str(LOADER), "0", "12"
    )
    assert slow.returncode == 0, slow.stderr[-2000:]
    before = json.loads(slow.stdout)
    assert before["verdict"]["cause"] == "input_pipeline_bound"
    assert "num_workers=" in before["verdict"]["fix"]
    assert "main process" in " ".join(before["verdict"]["evidence"])
    assert "trained 12 steps" in slow.stderr  # the command's output, moved off stdout
    assert len(list((tmp_path / "w0").glob("trace-pid*.json.gz"))) == 1  # no rank: by pid
    rank = before["ranks"][0]
    assert len(rank["steps"]) == 5 and rank["data_loader"] == "main process"
    wait_before = sum(s["host_ms"]["data_wait"] for s in rank["steps"]) / 5
    fast = run_dlrig_process("profile", "--json", "--", PYTHON, str(LOADER), "2", "12")
    assert fast.returncode == 0, fast.stderr[-2000:]
    after = json.loads(fast.stdout)["ranks"][0]
    assert after["data_loader"] == "worker processes"
    wait_after = sum(s["host_ms"]["data_wait"] for s in after["steps"]) / len(after["steps"])
    assert wait_after < 0.7 * wait_before, (wait_before, wait_after)
    # the trace folder from the first run compares with the second's document
    (tmp_path / "after.json").write_text(fast.stdout)
    compared = run_dlrig_process(
        "profile", "compare", str(tmp_path / "w0"), str(tmp_path / "after.json"), "--json"
    )
    assert compared.returncode == 0, compared.stderr
    data_wait = next(r for r in json.loads(compared.stdout)["host_ms"] if r["name"] == "data_wait")
    assert data_wait["delta_ms"] < 0


@pytest.mark.slow
def test_spawned_ranks_without_rank_variables_get_a_trace_each(run_dlrig_process, tmp_path):
    """torch.multiprocessing.spawn's workers learn their rank from init_process_group only:
    each still writes its own trace (named by torch.distributed's rank), the job succeeds."""
    script = ROOT / "tests" / "data" / "train_scripts" / "profile_spawn.py"
    env = {k: "" for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    done = run_dlrig_process(
        "profile", "--json", "--out", str(tmp_path), "--", PYTHON, str(script), "10", env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "both ranks done" in done.stderr
    document = json.loads(done.stdout)
    assert [r["rank"] for r in document["ranks"]] == [0, 1]
    assert sorted(p.name for p in tmp_path.glob("trace-*.json.gz")) == [
        "trace-rank0.json.gz",
        "trace-rank1.json.gz",
    ]

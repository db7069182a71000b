"""`dlrig train` as users run it: the command's exit code, --json, options anywhere, `--`."""

from __future__ import annotations

import json
import sys

from tests.conftest import ROOT

TINY = str(ROOT / "tests" / "data" / "train_scripts" / "tiny.py")


def test_json_envelope_with_the_runs_summary_and_options_after_the_script(run_dlrig):
    done = run_dlrig("train", TINY, "--steps", "3", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)  # the script's own stdout went to stderr
    assert list(document)[:2] == ["schema", "schema_version"]
    assert document["schema"] == "dlrig.train" and document["exit_code"] == 0
    assert document["command"] == [sys.executable, TINY, "--steps", "3"]
    summary = document["summary"]
    assert summary["steps"] == 3 and summary["samples"] == 24
    assert summary["stopped_by"] == "max_steps"
    assert set(summary["time"]) == {"total_s", "data_wait_s", "compute_s", "communication_s"}
    assert "script stdout" in done.stderr


def test_double_dash_passes_everything_and_the_scripts_exit_code_comes_back(run_dlrig):
    done = run_dlrig("train", "--", sys.executable, TINY, "--steps", "2", "--json", "--exit", "3")
    assert done.returncode == 3, done.stderr
    assert "script stdout: json=True rank=0" in done.stdout  # its --json, not dlrig's
    assert "dlrig.train: 2 steps, 16 samples" in done.stderr


def test_a_failing_command_keeps_its_code_and_json_has_no_summary(run_dlrig):
    done = run_dlrig("train", "--json", "--", sys.executable, "-c", "raise SystemExit(5)")
    assert done.returncode == 5
    document = json.loads(done.stdout)
    assert document["exit_code"] == 5 and document["summary"] is None


def test_bad_usage_is_one_line_and_exit_2(run_dlrig):
    done = run_dlrig("train")
    assert done.returncode == 2
    assert "no training command given" in done.stderr and "Traceback" not in done.stderr
    done = run_dlrig("train", "--", "no-such-program-xyz")
    assert done.returncode == 2
    assert "no-such-program-xyz: command not found" in done.stderr
    done = run_dlrig("train", "--gpus", "0", TINY)
    assert done.returncode == 2 and "--gpus 0" in done.stderr


def test_gpus_inside_a_multi_node_slurm_job_points_at_the_sbatch(run_dlrig):
    done = run_dlrig("train", "--gpus", "1", TINY, env={"SLURM_NNODES": "2"})
    assert done.returncode == 2
    assert "one separate run per node" in done.stderr
    assert "dlrig provision launch" in done.stderr


def test_help_ends_with_exit_codes(run_dlrig):
    done = run_dlrig("train", "--help")
    assert done.returncode == 0
    assert "Exit codes:" in done.stdout.split("Options:")[-1]

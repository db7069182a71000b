"""`dlrig diagnose` as users run it: files, stdin, a wrapped command, bad input."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.conftest import CORPUS

LOGS = CORPUS / "logs"
OOM_LOG = LOGS / "cuda_oom" / "dcrnn-train-2020.log"


def test_file_exit_0_and_json_shape(run_dlrig):
    done = run_dlrig("diagnose", "--json", str(OOM_LOG))
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert list(document)[:2] == ["schema", "schema_version"]  # dlrig.report.envelope
    assert document["schema"] == "dlrig.diagnose" and document["schema_version"] == 2
    root = document["causes"][0]
    assert root["cause"] == "cuda_oom"
    assert 0 < root["confidence"] <= 1
    assert root["evidence"][0] == {
        "source": str(OOM_LOG),
        "line": 1,
        "text": root["evidence"][0]["text"],
    }
    assert all(isinstance(fix, str) and fix for fix in root["fixes"])


def test_text_report_highlights_evidence(run_dlrig):
    done = run_dlrig("diagnose", str(OOM_LOG))
    assert "Root cause: GPU ran out of memory" in done.stdout
    assert "Tried to allocate 20.00 MiB" in done.stdout
    assert "fix:" in done.stdout


def test_clean_log_exit_3(run_dlrig):
    done = run_dlrig("diagnose", str(LOGS / "clean" / "anemoi-lightning-max-epochs-reached.log"))
    assert done.returncode == 3
    assert "No failure cause found" in done.stdout


def test_stdin(run_dlrig):
    done = run_dlrig("diagnose", "--json", "-", input=OOM_LOG.read_text())
    assert done.returncode == 0
    assert json.loads(done.stdout)["causes"][0]["cause"] == "cuda_oom"


def test_several_rank_files_as_one_run(run_dlrig):
    done = run_dlrig(
        "diagnose",
        "--json",
        str(LOGS / "nccl_timeout" / "discoscene-8xp40-broadcast-torchrun.log"),
        str(LOGS / "cuda_oom" / "trl-fsdp-sft-rank0-rtx3080.log"),
    )
    causes = [c["cause"] for c in json.loads(done.stdout)["causes"]]
    assert causes[:2] == ["cuda_oom", "nccl_timeout"]


def test_wrapped_command_passes_output_and_diagnoses(run_dlrig_process):
    script = (
        "import sys; print('epoch 1 loss 0.5', flush=True); "
        "sys.stderr.write('RuntimeError: CUDA error: an illegal memory access was encountered\\n'); sys.exit(4)"
    )
    done = run_dlrig_process("diagnose", "--", sys.executable, "-c", script)
    assert done.returncode == 4  # the command's own exit code
    assert done.stdout.startswith("epoch 1 loss 0.5")  # passed through unchanged
    assert "RuntimeError: CUDA error: an illegal memory access" in done.stderr
    assert "Illegal memory access on the GPU" in done.stderr


def test_wrapped_command_success_and_unknown_failure(run_dlrig_process):
    ok = run_dlrig_process("diagnose", "--", sys.executable, "-c", "print('done')")
    assert ok.returncode == 0 and ok.stdout == "done\n"
    unknown = run_dlrig_process("diagnose", "--", sys.executable, "-c", "import sys; sys.exit(7)")
    assert unknown.returncode == 7
    assert "No failure cause found" in unknown.stderr
    missing = run_dlrig_process("diagnose", "--", "/no/such/command")
    assert missing.returncode == 2
    assert "command not found" in missing.stderr


@pytest.mark.parametrize(
    "case", ["binary", "invalid utf-8", "100 MB line", "missing", "directory", "empty"]
)
def test_bad_input(run_dlrig, tmp_path, case):
    path = tmp_path / "input.log"
    expect_code, phrase = 2, None
    if case == "binary":
        path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + os.urandom(2048))
        phrase = "binary file"
    elif case == "invalid utf-8":
        path.write_bytes(
            b"step 1 \xff\xfe\xfa loss \xc3\x28\nRuntimeError: CUDA error: out of memory\n"
        )
        expect_code = 0
    elif case == "100 MB line":
        with path.open("wb") as stream:
            stream.write(
                b"x" * 50_000_000
                + b" uncorrectable ECC error encountered "
                + b"y" * 50_000_000
                + b"\n"
            )
        expect_code = 0
    elif case == "missing":
        path = tmp_path / "nope.log"
        phrase = "no such file"
    elif case == "directory":
        path = tmp_path
        phrase = "is a directory"
    elif case == "empty":
        # the CLI refuses an empty log as bad input (exit 2), like doctor --from does
        path.write_text("")
        phrase = "the file is empty"
    done = run_dlrig("diagnose", "--json", str(path))
    assert done.returncode == expect_code, (case, done.stderr[-300:])
    assert "Traceback" not in done.stderr
    if phrase:
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and phrase in lines[0] and str(path) in lines[0]
    if case == "100 MB line":
        assert json.loads(done.stdout)["causes"][0]["cause"] == "gpu_ecc_error"


def test_no_input_is_usage_error(run_dlrig):
    done = run_dlrig("diagnose")
    assert done.returncode == 2
    assert "no log given" in done.stderr


def test_machine_snapshot_option(run_dlrig, tmp_path):
    done = run_dlrig(
        "diagnose",
        "--json",
        "--machine",
        str(CORPUS / "collect_env" / "driver470-torch210-cu121-warning.txt"),
        str(LOGS / "driver_too_old" / "gpt-sovits-wrapped-11040.log"),
    )
    assert done.returncode == 0
    assert "530.30.02" in json.loads(done.stdout)["causes"][0]["fixes"][0]


def test_a_pipe_is_read_without_dash(run_dlrig):
    # `cat train.log | dlrig diagnose` (issue 23): a pipe on stdin is the log
    done = run_dlrig("diagnose", "--json", input=OOM_LOG.read_text())
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["causes"][0]["cause"] == "cuda_oom"
    empty = run_dlrig("diagnose", input="")
    assert empty.returncode == 2 and "no log given" in empty.stderr


def test_wrapped_command_json_has_command_exit_code_and_signal(run_dlrig_process):
    script = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    done = run_dlrig_process("diagnose", "--json", "--", sys.executable, "-c", script)
    assert done.returncode == 137
    document = json.loads(done.stdout)
    assert document["command"] == [sys.executable, "-c", script]
    assert document["exit_code"] == 137 and document["signal"] == "SIGKILL"
    # a bare kill -9 is not "no cause": the exit status is the evidence
    assert document["causes"][0]["cause"] == "cpu_oom_killed"
    plain = run_dlrig_process(
        "diagnose", "--json", "--", sys.executable, "-c", "import sys; sys.exit(7)"
    )
    assert json.loads(plain.stdout)["exit_code"] == 7
    assert json.loads(plain.stdout)["signal"] is None


def test_a_utf16_log_is_read_as_text(run_dlrig, tmp_path):
    # issue 30: what Windows PowerShell's `>` writes (UTF-16 with a byte-order mark) was "binary"
    log = tmp_path / "train-utf16.log"
    log.write_text(OOM_LOG.read_text(encoding="utf-8"), encoding="utf-16")
    done = run_dlrig("diagnose", "--json", str(log))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["causes"][0]["cause"] == "cuda_oom"

"""`doctor --from` as a user runs it: several files merged, formats told apart by structure,
bad inputs refused with one line and exit 2 (the real console script in a subprocess)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import CORPUS, NVSMI

PASTE = CORPUS / "collect_env" / "sm120-rtx5090d-cu126.txt"


def _one_line_error(result) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--from", str(NVSMI / "readme-gpud-xid-component.md")], "not a format dlrig reads"),
        (["--python", "/etc/passwd"], "--python /etc/passwd: not an executable"),
        (["--data-path", "/nonexistent"], "--data-path /nonexistent: no such directory"),
        (["--from", str(PASTE), "--from", "/nonexistent.xml"], "/nonexistent.xml"),
    ],
)
def test_bad_inputs_get_one_line_and_exit_2(run_dlrig, args, names):
    assert names in _one_line_error(run_dlrig("doctor", *args))


def test_several_from_files_make_one_machine_and_one_envelope(run_dlrig):
    result = run_dlrig(
        "doctor",
        "--json",
        "--from",
        str(PASTE),
        "--from",
        str(NVSMI / "table-580.173.02-h200-idle.txt"),
        "--from",
        str(NVSMI / "dmesg-xid119-gsp-rpc-timeout.log"),
    )
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    assert list(document)[:2] == ["schema", "schema_version"]
    assert document["schema"] == "dlrig.doctor"
    machine = document["machine"]
    assert machine["origin"]["kind"] == "merged"
    assert machine["frameworks"]["torch"]["version"].startswith("2.")
    assert len(machine["kernel_log"]["xid_events"]) == 5
    xid = next(c for c in document["checks"] if c["id"] == "gpu.xid_events")
    assert xid["status"] != "skip"


def test_plain_nvidia_smi_table_is_read(run_dlrig):
    result = run_dlrig("doctor", "--json", "--from", str(NVSMI / "table-595.80-l40s-load.txt"))
    assert result.returncode in (0, 1), result.stderr
    gpus = json.loads(result.stdout)["machine"]["gpus"]
    assert [g["name"] for g in gpus] == ["NVIDIA L40S"]


def test_monitor_replay_refuses_a_collect_env_paste(run_dlrig):
    result = run_dlrig("monitor", "--once", "--replay", str(PASTE))
    line = _one_line_error(result)
    assert "no GPU readings" in line
    assert "healthy" not in result.stdout

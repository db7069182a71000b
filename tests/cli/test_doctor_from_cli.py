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


def test_several_from_files_make_one_machine_and_one_envelope(run_dlrig, tmp_path):
    # The H100 capture's table, -q output and CSV of the same state: one machine.
    from dlrig.machine.readers import nvsmi_capture

    _, sections = nvsmi_capture.split_sections(
        (NVSMI / "h100-80gb-mig-4inst-capture-idle-load.txt").read_text()
    )
    paths = []
    for index, prefix in enumerate(("nvidia-smi (default", "query (-q)")):
        section = next(s for s in sections if s.state == "load" and s.what.startswith(prefix))
        path = tmp_path / f"part{index}.txt"
        path.write_text(section.body)
        paths += ["--from", str(path)]
    result = run_dlrig("doctor", "--json", *paths)
    assert result.returncode in (0, 1), result.stderr
    document = json.loads(result.stdout)
    assert list(document)[:2] == ["schema", "schema_version"]
    assert document["schema"] == "dlrig.doctor"
    machine = document["machine"]
    assert machine["origin"]["kind"] == "merged"
    (gpu,) = machine["gpus"]
    assert gpu["uuid"]  # from the -q output
    assert gpu["processes"]  # from both


def test_from_files_of_different_machines_exit_2_naming_the_disagreement(run_dlrig):
    line = _one_line_error(
        run_dlrig(
            "doctor",
            "--from",
            str(CORPUS / "collect_env" / "sm90-h100-torch201-cu117-warning.txt"),
            "--from",
            str(NVSMI / "tesla-t4-2procs-q-x.xml"),
        )
    )
    assert "not the same machine" in line and "driver 535.104.12 vs 515.105.01" in line


def test_from_stdin_reads_the_piped_file(run_dlrig):
    xml = (NVSMI / "tesla-t4-2procs-q-x.xml").read_text()
    result = run_dlrig("doctor", "--json", "--from", "-", input=xml)
    assert result.returncode in (0, 1), result.stderr
    machine = json.loads(result.stdout)["machine"]
    assert [g["name"] for g in machine["gpus"]] == ["Tesla T4"]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--timeout", "nan"], "'nan' is not a finite number"),
        (["--timeout", "inf"], "'inf' is not a finite number"),
        (["--timeout", "1e308"], "out of range"),
        (["--ram-ratio", "nan"], "--ram-ratio"),
        (["--data-path", "/etc/passwd"], "--data-path /etc/passwd: not a directory"),
        (["--bogus"], "No such option '--bogus'"),
        (["--explain"], "'--explain' requires an argument"),
        (["--from", "/proc/self/status"], "not a format dlrig reads"),
    ],
)
def test_bad_options_are_one_line_in_dlrigs_style(run_dlrig, args, names):
    line = _one_line_error(run_dlrig("doctor", *args))
    assert names in line
    # click's own usage errors too: "dlrig doctor: error: ... — fix: ..." (not Usage/Try/Error)
    assert line.startswith(("dlrig doctor: error:", "dlrig: error:")), line
    assert "— fix:" in line


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

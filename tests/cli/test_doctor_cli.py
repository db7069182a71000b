"""`dlrig doctor` as users run it: the real console script in a subprocess."""

from __future__ import annotations

import json
import os

import pytest

from tests.conftest import CORPUS, NVSMI


def test_doctor_on_this_cpu_only_machine(run_dlrig):
    done = run_dlrig("doctor")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "CPU-only" in done.stdout
    assert "Traceback" not in done.stderr


def test_json_document(run_dlrig):
    done = run_dlrig("doctor", "--json")
    document = json.loads(done.stdout)
    assert document["schema_version"] == 1
    assert document["machine"]["schema"] == "dlrig.machine"
    assert len(document["checks"]) >= 35
    for check in document["checks"]:
        assert set(check) == {"id", "area", "status", "title", "evidence", "fix", "cause"}
        assert check["status"] in {"ok", "info", "warn", "fail", "skip"}


def test_from_recorded_xml_exits_1_on_failure(run_dlrig):
    done = run_dlrig("doctor", "--from", str(NVSMI / "dmesg-xid119-gsp-rpc-timeout.log"))
    assert done.returncode == 1
    assert "Xid 119" in done.stdout


def test_from_collect_env_names_cause_in_json(run_dlrig):
    done = run_dlrig(
        "doctor", "--json", "--from", str(CORPUS / "collect_env" / "sm120-rtx5090d-cu126.txt")
    )
    assert done.returncode == 1
    failing = [c for c in json.loads(done.stdout)["checks"] if c["status"] == "fail"]
    assert any(c["cause"] == "no_kernel_image" for c in failing)


def test_markdown_for_bug_reports(run_dlrig):
    done = run_dlrig("doctor", "--markdown", "--from", str(NVSMI / "tesla-t4-2procs-q-x.xml"))
    assert done.stdout.startswith("### dlrig doctor")
    assert "`gpu.pcie_width`" in done.stdout
    assert "| GPUs | 1 × Tesla T4" in done.stdout


def test_save_then_from_round_trip(run_dlrig, tmp_path):
    snapshot = tmp_path / "box.json"
    first = run_dlrig("doctor", "--json", "--save", str(snapshot))
    again = run_dlrig("doctor", "--json", "--from", str(snapshot))
    assert again.returncode == first.returncode
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert a["machine"] == b["machine"]
    assert [c["status"] for c in a["checks"]] == [c["status"] for c in b["checks"]]
    # `--json` output of doctor itself is also accepted as input
    report = tmp_path / "report.json"
    report.write_text(first.stdout)
    assert run_dlrig("doctor", "--from", str(report)).returncode == first.returncode


def test_save_is_atomic_and_keeps_no_temp_files(run_dlrig, tmp_path):
    snapshot = tmp_path / "box.json"
    snapshot.write_text("old content")
    run_dlrig("doctor", "--save", str(snapshot), "--from", str(NVSMI / "rtx3090-q-x.xml"))
    assert json.loads(snapshot.read_text())["schema"] == "dlrig.machine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["box.json"]


def test_explain_and_list(run_dlrig):
    done = run_dlrig("doctor", "--explain", "gpu.pcie_gen")
    assert done.returncode == 0
    assert "idle" in done.stdout
    listing = json.loads(run_dlrig("doctor", "--list-checks", "--json").stdout)
    assert len(listing["checks"]) >= 35
    bad = run_dlrig("doctor", "--explain", "gpu.pcie_gne")
    assert bad.returncode == 2
    assert "did you mean gpu.pcie_gen" in bad.stderr


def _bad_inputs(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    binary = tmp_path / "blob.bin"
    binary.write_bytes(os.urandom(4096) + b"\x00" * 64)
    truncated = tmp_path / "truncated.xml"
    truncated.write_text((NVSMI / "tesla-t4-2procs-q-x.xml").read_text()[:3000])
    other_json = tmp_path / "package.json"
    other_json.write_text(json.dumps({"name": "left-pad", "version": "1.3.0"}))
    huge = tmp_path / "huge.log"
    with huge.open("wb") as stream:
        stream.truncate(500 * 1000 * 1000)  # sparse: 500 MB without using the disk
    unknown = tmp_path / "notes.txt"
    unknown.write_text("hello\nthis is not a machine\n")
    return {
        "empty": (empty, "empty"),
        "binary": (binary, "binary"),
        "truncated xml": (truncated, "not well-formed"),
        "json of another schema": (other_json, "not a dlrig machine snapshot"),
        "500 MB file": (huge, "too large"),
        "directory": (tmp_path, "is a directory"),
        "missing path": (tmp_path / "nope.xml", "no such file"),
        "unknown text": (unknown, "not a format dlrig reads"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "empty",
        "binary",
        "truncated xml",
        "json of another schema",
        "500 MB file",
        "directory",
        "missing path",
        "unknown text",
    ],
)
def test_bad_input_is_one_clear_line_with_exit_2(run_dlrig, tmp_path, case):
    path, phrase = _bad_inputs(tmp_path)[case]
    done = run_dlrig("doctor", "--from", str(path))
    assert done.returncode == 2, (case, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(path) in lines[0]
    assert phrase in lines[0]
    assert "fix:" in lines[0]
    assert "Traceback" not in done.stderr


def test_usage_errors_exit_2(run_dlrig):
    assert run_dlrig("doctor", "--json", "--markdown").returncode == 2
    assert run_dlrig("doctor", "--no-such-flag").returncode == 2
    assert run_dlrig("doctor", "--python", "/nonexistent/python").returncode == 2


def test_every_command_has_help(run_dlrig):
    done = run_dlrig("--help")
    assert done.returncode == 0
    assert "doctor" in done.stdout
    assert run_dlrig("doctor", "--help").returncode == 0


def test_python_that_is_not_a_python_and_an_empty_explain_are_refused(run_dlrig):
    # issue 30: `--python /bin/ls` exited 0 (the environment was silently not inspected) and
    # `--explain ''` ran the whole doctor
    done = run_dlrig("doctor", "--python", "/bin/ls")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--python /bin/ls: did not run as a Python interpreter" in done.stderr
    empty = run_dlrig("doctor", "--explain", "")
    assert empty.returncode == 2 and "no such check" in empty.stderr


def test_a_utf16_recording_is_read(run_dlrig, tmp_path):
    capture = NVSMI / "h200-capture-idle-load.txt"
    utf16 = tmp_path / "h200-utf16.txt"
    utf16.write_text(capture.read_text(encoding="utf-8"), encoding="utf-16")
    done = run_dlrig("doctor", "--from", str(utf16), "--json")
    plain = run_dlrig("doctor", "--from", str(capture), "--json")
    assert done.returncode == plain.returncode, done.stderr
    gpus = json.loads(done.stdout)["machine"]["gpus"]
    assert [g["name"] for g in gpus] == [
        g["name"] for g in json.loads(plain.stdout)["machine"]["gpus"]
    ]


def test_fleet_without_a_slurm_cluster_is_bad_input_not_odd_nodes(run_dlrig, tmp_path):
    # issue 30: exit 1 (the "nodes disagree" code) with four raw sinfo lines
    conf = tmp_path / "slurm.conf"
    conf.write_text("not a slurm configuration\n")
    done = run_dlrig("doctor", "--fleet", "srun", env={"SLURM_CONF": str(conf)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "--fleet srun: sinfo failed" in done.stderr


def test_fleet_markdown_is_refused_rather_than_printed_as_text(run_dlrig, tmp_path):
    done = run_dlrig("doctor", "--fleet", str(tmp_path), "--markdown")
    assert done.returncode == 2 and "--fleet has no Markdown form" in done.stderr

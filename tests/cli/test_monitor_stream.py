"""`dlrig monitor` off a terminal: a frame per sample as it goes (a pipe, `nohup`, `tee`), or one
logfmt line per GPU, or one JSON document per sample. Values are the recorded captures' own."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys

from tests.conftest import NVSMI, ROOT

H200 = NVSMI / "h200-capture-idle-load.txt"  # nvidia-smi -q idle, then under gpu_burn
T4 = NVSMI / "tesla-t4-2procs-q-x.xml"


def test_a_piped_monitor_prints_each_frame_as_it_goes_and_stops_on_sigterm():
    # Before, the live view printed nothing into a pipe until it was stopped.
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dlrig.cli.main",
            "monitor",
            "--replay",
            str(H200),
            "--interval",
            "0.2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if k != "COLUMNS"},
    )
    try:
        headers = 0
        seen: list[str] = []
        while headers < 2:  # two frames read while the command still runs
            line = process.stdout.readline()
            assert line, "".join(seen) + process.stderr.read()
            seen.append(line)
            headers += line.startswith("── ")
        assert process.poll() is None
        frame = "".join(seen)
        assert "0 NVIDIA H200" in frame and "0.0/140.4" in frame and "28°C" in frame, frame
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate()
    assert process.returncode == 143, err


def test_lines_are_one_logfmt_line_per_gpu_per_sample(run_dlrig):
    done = run_dlrig(
        "monitor",
        "--replay",
        str(H200),
        "--replay-state",
        "load",
        "--replicate",
        "2",
        "--interval",
        "0.1",
        "--count",
        "3",
        "--format",
        "lines",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 6, done.stdout
    fields = [
        dict(part.split("=", 1) for part in line.replace('"NVIDIA H200"', "H200").split())
        for line in lines
    ]
    assert [f["gpu"] for f in fields] == ["0", "1"] * 3
    # The capture under load: 100 % utilisation, 31.6 of 140.4 GiB, 627 of 700 W, 52 °C, 1980 MHz.
    for f in fields:
        assert f["status"] == "ok" and f["util_pct"] == "100" and f["temp_c"] == "52"
        assert f["mem_used_gib"] == "31.6" and f["mem_total_gib"] == "140.4"
        assert f["power_limit_w"] == "700" and f["sm_mhz"] == "1980" and f["pcie"] == "gen5x16"
        assert f["processes"] == "3"


def test_json_is_one_versioned_document_per_sample(run_dlrig):
    done = run_dlrig(
        "monitor", "--format", "json", "--count", "2", "--replay", str(T4), "--interval", "0.1"
    )
    assert done.returncode == 0, done.stderr
    documents = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(documents) == 2
    assert {d["schema"] for d in documents} == {"dlrig.monitor.sample"}
    assert documents[1]["sample"]["sequence"] > documents[0]["sample"]["sequence"]
    assert documents[0]["sample"]["gpus"][0]["gpu"]["name"] == "Tesla T4"


def test_the_frame_adapts_to_the_width_it_is_given(run_dlrig):
    narrow = run_dlrig("monitor", "--once", "--replay", str(T4), env={"COLUMNS": "80"})
    wide = run_dlrig("monitor", "--once", "--replay", str(T4), env={"COLUMNS": "200"})
    assert narrow.returncode == wide.returncode == 0
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 80, narrow.stdout
    rows = [
        next(line for line in done.stdout.splitlines() if line.startswith("0 "))
        for done in (narrow, wide)
    ]
    # The capture's numbers whole in both; the extra width went to the bars and sparkline.
    for number in ("27/70", "40°C", "585/1590", "1.0/15.0", "Gen3 x8"):
        assert all(number in row for row in rows), rows
    assert len(rows[1]) > len(rows[0]) + 20, rows


def test_the_process_list_sorted_and_filtered_from_the_command_line(run_dlrig):
    encode = NVSMI / "rtx4080super-capture-idle-load.txt"  # two ffmpeg NVENC jobs under load
    done = run_dlrig(
        "monitor",
        "--once",
        "--replay",
        str(encode),
        "--replay-state",
        "load",
        "--filter",
        "ffmpeg",
        "--sort",
        "sm",
    )
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if "ffmpeg" in line]
    # pmon's last rows: pid 5022 at SM 3 % / NVENC 55 %, pid 5021 at 2 % / 14 %.
    assert [row[1] for row in rows] == ["5022", "5021"], done.stdout
    assert rows[0][3:5] == ["3", "55/-"], done.stdout
    assert "plasmashell" not in done.stdout


def test_a_gzip_replay_reads_as_doctor_from_reads_it(run_dlrig, tmp_path):
    # Before, monitor --replay refused a .gz that doctor --from read.
    packed = tmp_path / "t4.xml.gz"
    packed.write_bytes(gzip.compress(T4.read_bytes()))
    done = run_dlrig("monitor", "--once", "--json", "--replay", str(packed))
    assert done.returncode == 0, done.stderr
    [gpu] = json.loads(done.stdout)["sample"]["gpus"]
    assert gpu["gpu"]["name"] == "Tesla T4"

"""`dlrig monitor` from the command line: --once, record (--to and --db), report, assets, and
one-line answers to bad input."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dlrig.machine import recorder
from dlrig.machine.gpu_sources import ReplaySource
from dlrig.machine.readers import nvsmi_capture
from tests.conftest import NVSMI, ROOT

H200 = NVSMI / "h200-capture-idle-load.txt"
T4 = NVSMI / "tesla-t4-2procs-q-x.xml"
XID = NVSMI / "dmesg-xid119-gsp-rpc-timeout.log"


def _one_line_error(result: subprocess.CompletedProcess, code: int = 2) -> str:
    assert result.returncode == code, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_once_json_is_a_versioned_document(run_dlrig) -> None:
    result = run_dlrig("monitor", "--once", "--json", "--replay", str(T4))
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "dlrig.monitor.sample" and document["schema_version"] == 1
    [gpu] = document["sample"]["gpus"]
    assert gpu["status"] == "ok" and gpu["gpu"]["name"] == "Tesla T4"
    assert any(r["cause"] == "pcie_link_degraded" for r in document["readings"])


def test_once_text_shows_gpu_processes_and_reading(run_dlrig) -> None:
    result = run_dlrig("monitor", "--once", "--replay", str(H200), "--replay-state", "load")
    assert result.returncode == 0, result.stderr
    assert "H200" in result.stdout and "./gpu_burn" in result.stdout
    assert "» all 1 GPU(s) busy (mean 100%)" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--replay", "/nonexistent.xml", "--once"], "/nonexistent.xml: no such file"),
        (["--replay", str(H200), "--interval", "0", "--once"], "--interval 0.0 is out of range"),
        (["--replay", str(H200), "--replay-state", "busy", "--once"], "'busy' is not in"),
        (["--replay", str(XID), "--once"], "hold no GPU readings"),
        (["--json"], "--json needs --once"),
        (["record", "--replay", str(H200)], "exactly one of --to FILE or --db FILE"),
        (["report", "/nonexistent.db"], "no such history database"),
        (["report", str(H200)], "not a usable SQLite database"),
        (["report", str(NVSMI)], "is a directory"),
        (["serve", "--replay", str(H200), "--port", "70000"], "--port 70000 is not a TCP port"),
    ],
)
def test_bad_input_gets_one_line_and_exit_2(run_dlrig, args: list[str], message: str) -> None:
    line = _one_line_error(run_dlrig("monitor", *args))
    assert message in line
    assert "fix:" in line


def test_serve_on_a_port_in_use_says_so(run_dlrig) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line = _one_line_error(
            run_dlrig("monitor", "serve", "--replay", str(H200), "--port", str(port))
        )
    assert f"cannot listen on 127.0.0.1:{port}" in line


def test_without_nvml_it_says_why_and_how_to_replay(run_dlrig) -> None:
    result = run_dlrig("monitor", "--once")
    if result.returncode == 0:
        pytest.skip("this machine has a working NVML")
    line = _one_line_error(result, code=1)
    assert "cannot read the GPUs through NVML" in line and "--replay FILE" in line


def test_record_db_then_report_with_plots_and_cost(run_dlrig, tmp_path) -> None:
    db = tmp_path / "h.db"
    result = run_dlrig(
        "monitor", "record", "--db", str(db), "--replay", str(H200), "--interval", "0.05",
        "--frame-seconds", "0.5", "--duration", "2.5", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["schema"] == "dlrig.monitor.record" and summary["samples_dropped"] == 0
    import sqlite3

    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0]
    assert summary["samples_written"] == rows > 10  # one GPU: a row per sample
    result = run_dlrig(
        "monitor", "report", str(db), "--json", "--price-per-kwh", "0.25",
        "--plots", str(tmp_path / "plots"), "--idle-min-seconds", "0.2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    [gpu] = document["gpus"]
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["utilization_distribution"]["0-10%"] > 0.2
    assert gpu["utilization_distribution"]["90-100%"] > 0.2
    assert gpu["idle_periods"]
    assert document["cost"] == pytest.approx(document["energy_kwh"] * 0.25)
    assert sorted(Path(p).name for p in document["plots"]) == [
        "memory.png",
        "power.png",
        "temperature.png",
        "utilization.png",
    ]
    text = run_dlrig("monitor", "report", str(db), "--price-per-kwh", "0.25")
    assert text.returncode == 0 and "kWh, cost" in text.stdout


def test_assets_written_pass_promtool(run_dlrig, tmp_path) -> None:
    result = run_dlrig("monitor", "assets", "--to", str(tmp_path / "assets"), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "dlrig.monitor.assets"
    assert sorted(Path(p).name for p in document["written"]) == sorted(
        p.name for p in (tmp_path / "assets").iterdir()
    )
    written = sorted(p.name for p in (tmp_path / "assets").iterdir())
    assert written == [
        "alerts.yml",
        "alerts_test.yml",
        "grafana-dashboard.json",
        "prometheus-scrape.yml",
    ]
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (.ci/run installs it)")
    for command in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]):
        checked = subprocess.run(
            [promtool, *command], cwd=tmp_path / "assets", capture_output=True, text=True
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "SUCCESS" in checked.stdout + checked.stderr


# --- record --to: a fake nvidia-smi that plays the sections of a real capture ----------------

_FAKE_SMI = textwrap.dedent(
    """\
    #!{python}
    import os, sys
    sys.path.insert(0, {src!r})
    from dlrig.machine.readers import nvsmi_capture
    _, sections = nvsmi_capture.split_sections(open(os.environ["FAKE_CAPTURE"]).read())
    state = os.environ["FAKE_STATE"]
    args = sys.argv[1:]
    if args == ["--version"]: want = ("capabilities", "version")
    elif args == ["--help-query-gpu"]: want = ("capabilities", "help-query-gpu")
    elif args == ["-L"]: want = ("capabilities", "list (-L)")
    elif args == ["topo", "-m"]: want = ("capabilities", "topo -m")
    elif args == ["nvlink", "-s"]: want = ("capabilities", "nvlink -s")
    elif args == []: want = (state, "nvidia-smi (default table)")
    elif args == ["-q"]: want = (state, "query (-q)")
    elif args[0].startswith("--query-gpu="): want = (state, "query-gpu (csv")
    elif args[0].startswith("--query-compute-apps="): want = (state, "query-compute-apps")
    else: sys.exit("unexpected arguments: %r" % (args,))
    for section in sections:
        if section.state == want[0] and section.what.startswith(want[1]):
            print(section.body)
            sys.exit(0)
    sys.exit(6)
    """
)


@pytest.fixture
def fake_smi(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(_FAKE_SMI.format(python=sys.executable, src=str(ROOT / "src")))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_CAPTURE": str(H200)}


def test_record_to_captures_states_that_replay_like_the_original(
    run_dlrig, tmp_path, fake_smi
) -> None:
    out = tmp_path / "mine.txt"
    for state in ("idle", "load"):
        result = run_dlrig(
            "monitor", "record", "--to", str(out), "--state", state, "--json",
            env={**fake_smi, "FAKE_STATE": state},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["state"] == state
    original = ReplaySource([H200])
    mine = ReplaySource([out])
    assert [f.state for f in mine.frames] == ["idle", "load"]
    for theirs, ours in zip(original.frames, mine.frames, strict=True):
        assert ours.gpus == theirs.gpus
    _, sections = nvsmi_capture.split_sections(out.read_text())
    assert any(s.what.startswith("query-gpu field list") for s in sections)
    again = run_dlrig(
        "monitor", "record", "--to", str(out), "--state", "load",
        env={**fake_smi, "FAKE_STATE": "load"},
    )  # fmt: skip
    assert "already has a state 'load'" in _one_line_error(again)
    assert ReplaySource([out]).frames == mine.frames  # the refused run changed nothing


def test_record_to_without_nvidia_smi_says_so(run_dlrig, tmp_path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    result = run_dlrig(
        "monitor", "record", "--to", str(tmp_path / "x.txt"), env={"PATH": str(empty)}
    )
    line = _one_line_error(result, code=1)
    assert "nvidia-smi is not installed" in line
    assert not (tmp_path / "x.txt").exists()


def test_query_fields_match_the_capture_tools_own_list() -> None:
    # The capture holds `--help-query-gpu` and, separately, the field list its recorder derived
    # from it; ours must derive the same 212 fields.
    _, sections = nvsmi_capture.split_sections(H200.read_text())
    help_text = next(s for s in sections if s.what.startswith("help-query-gpu")).body
    derived = next(s for s in sections if s.what.startswith("query-gpu field list")).body
    assert recorder.query_fields(help_text) == derived.split()


def test_live_view_runs_until_interrupted(tmp_path) -> None:
    import signal
    import time

    process = subprocess.Popen(
        [sys.executable, "-m", "dlrig", "monitor", "--replay", str(H200), "--interval", "0.2",
         "--frame-seconds", "0.5"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    time.sleep(3)
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0, err
    assert "H200" in out and "Traceback" not in err

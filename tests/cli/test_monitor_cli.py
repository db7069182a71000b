"""`dlrig monitor` from the command line: --once, record (--out and --db), report, assets, the
machine without NVML (this one), the nvidia-smi fallback, MIG instances, --gpu-index, options in
either place, and one-line answers to bad input."""

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
        (
            ["--replay", str(H200), "--interval", "0", "--once"],
            "'0' is out of range: give a number at least 0.05",
        ),
        (["--replay", str(H200), "--replay-state", "busy", "--once"], "'busy' is not in"),
        (["--replay", str(XID), "--once"], "hold no GPU readings"),
        (["--json"], "--json needs --once"),
        (["record", "--replay", str(H200)], "exactly one of --out FILE or --db FILE"),
        (["--replay", str(T4), "--gpu-index", "3", "--once"], "--gpu-index 3: replay of"),
        (["--once", "serve", "--replay", str(T4)], "--once is for the live view"),
        (["--count", "2", "record", "--replay", str(T4)], "--count is for the live view"),
        (["--once", "--count", "2", "--replay", str(T4)], "--once takes no --count or --format"),
        (["--format", "csv", "--replay", str(T4)], "'csv' is not one of"),
        (["--sort", "sm", "serve", "--replay", str(T4)], "--sort is for the live view"),
        (["--sort", "heat", "--once", "--replay", str(T4)], "'heat' is not one of"),
        (["assets"], "assets needs --out DIR"),
        (["report", "/nonexistent.db"], "no such history database"),
        (["report", str(H200)], "not a dlrig history database"),
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


def test_without_nvml_it_shows_the_host_and_says_why_there_are_no_gpus(run_dlrig, tmp_path) -> None:
    empty = tmp_path / "bin"  # no nvidia-smi either
    empty.mkdir()
    env = {"PATH": f"{empty}{os.pathsep}{Path(sys.executable).parent}"}
    result = run_dlrig("monitor", "--once", "--json", env=env)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    if document["source"]["kind"] == "nvml":
        pytest.skip("this machine has a working NVML")
    assert document["source"]["kind"] == "none" and document["sample"]["gpus"] == []
    # The binding's own words for the failure, then nvidia-smi's.
    note = document["source"]["note"]
    assert note.startswith("NVML: ") and "nvidia-smi: not found" in note
    host = document["sample"]["host"]
    assert host["memory_total_bytes"] > 0 and len(host["cpu_percent_per_core"]) == os.cpu_count()
    text = run_dlrig("monitor", "--once", env=env)
    assert text.returncode == 0, text.stderr
    assert "nvidia-smi: not found" in text.stdout and "host CPU" in text.stdout


def test_without_nvml_it_reads_nvidia_smi_where_that_works(run_dlrig, fake_smi) -> None:
    result = run_dlrig("monitor", "--once", "--json", env={**fake_smi, "FAKE_STATE": "load"})
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    if document["source"]["kind"] == "nvml":
        pytest.skip("this machine has a working NVML")
    assert document["source"]["kind"] == "nvidia-smi"
    assert document["source"]["note"].startswith("NVML: ")
    [reading] = document["sample"]["gpus"]
    gpu = reading["gpu"]
    # load query-gpu: "power.draw [W] = 627.40 W", "memory.used [MiB] = 32362 MiB", and the
    # query-compute-apps rows "10291, 10293, 10309"
    assert gpu["name"] == "NVIDIA H200" and gpu["power_draw_watts"] == pytest.approx(627.40)
    assert gpu["memory_used_bytes"] == 32362 * 2**20
    assert sorted(p["pid"] for p in gpu["processes"]) == [10291, 10293, 10309]
    assert document["source"]["driver_version"] == "590.48.01"


def test_live_view_shows_mig_instances(run_dlrig) -> None:
    mig = NVSMI / "h100-80gb-mig-4inst-capture-idle-load.txt"
    result = run_dlrig("monitor", "--once", "--replay", str(mig), "--replay-state", "load")
    assert result.returncode == 0, result.stderr
    # The capture's "MIG devices" table: GI 2 with 60 SMs, "11091MiB / 40448MiB"; GI 9 and 10
    # with 16 SMs, "9MiB / 9984MiB".
    lines = [line for line in result.stdout.splitlines() if "MIG" in line and "└" in line]
    assert len(lines) == 4, result.stdout
    assert "GI 2" in lines[0] and "60 SMs" in lines[0] and "10.8/39.5" in lines[0].split()
    assert "GI 9" in lines[2] and "16 SMs" in lines[2] and "0.0/9.8" in lines[2].split()


def test_gpu_index_selects_gpus_before_or_after_a_subcommand(run_dlrig, tmp_path) -> None:
    result = run_dlrig(
        "monitor", "--replay", str(T4), "--replicate", "4", "--gpu-index", "3",
        "--gpu-index", "1", "--once", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert [g["index"] for g in json.loads(result.stdout)["sample"]["gpus"]] == [1, 3]
    db = tmp_path / "h.db"
    # Group options before the subcommand: the recorder reads the replay, GPU 2 only.
    recorded = run_dlrig(
        "monitor", "--replay", str(T4), "--replicate", "4", "--gpu-index", "2",
        "--interval", "0.05", "record", "--db", str(db), "--duration", "1", "--json",
    )  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    import sqlite3

    with sqlite3.connect(db) as conn:
        gpus = conn.execute("SELECT DISTINCT gpu FROM gpu_samples").fetchall()
    assert gpus == [(2,)]
    summary = json.loads(recorded.stdout)
    assert list(summary)[:2] == ["schema", "schema_version"] and summary["stopped_by"] is None


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
        "--out", str(tmp_path / "plots"), "--idle-min-seconds", "0.2",
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
    # In a pipe (80 columns) every figure is still there, one block per GPU, nothing cut.
    assert "GPU 0 H200" in text.stdout and "90-100%" in text.stdout
    # (The history's own path is printed whole, however long.)
    figures = [line for line in text.stdout.splitlines() if str(db) not in line]
    assert max(len(line) for line in figures) <= 80, text.stdout
    for bad in ("nan", "inf", "-1"):
        refused = run_dlrig("monitor", "report", str(db), "--price-per-kwh", bad)
        assert refused.returncode == 2 and "--price-per-kwh" in refused.stderr
    # Options before the argument, the group's --json, and the old --plots spelling.
    before = run_dlrig("monitor", "--json", "report", "--plots", str(tmp_path / "old"), str(db))
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout).keys() == document.keys()
    assert len(list((tmp_path / "old").glob("*.png"))) == 4


@pytest.mark.parametrize("dcgm_names", [False, True])
def test_assets_written_pass_promtool(run_dlrig, tmp_path, dcgm_names: bool) -> None:
    out = tmp_path / "assets"
    flags = ["--dcgm-names"] if dcgm_names else []
    result = run_dlrig("monitor", "assets", "--out", str(out), "--json", *flags)
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "dlrig.monitor.assets"
    assert document["names"] == ("dcgm" if dcgm_names else "dlrig")
    written = sorted(p.name for p in out.iterdir())
    assert sorted(Path(p).name for p in document["written"]) == written
    assert written == [
        "alerts.yml",
        "alerts_test.yml",
        "grafana-dashboard.json",
        "prometheus-scrape.yml",
    ]
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is missing: `make test` installs the prometheus package"
    for command in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]):
        checked = subprocess.run([promtool, *command], cwd=out, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "SUCCESS" in checked.stdout + checked.stderr
    rules = (out / "alerts.yml").read_text()
    assert ("DCGM_FI_DEV_PCIE_LINK_WIDTH" in rules) == dcgm_names


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_assets_are_readable_as_the_umask_says_and_leave_no_temp_files(tmp_path, umask) -> None:
    out = tmp_path / "assets"
    # The old spelling --to still works (hidden from --help).
    done = subprocess.run(
        [sys.executable, "-m", "dlrig", "monitor", "assets", "--to", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: os.umask(umask),
    )
    assert done.returncode == 0, done.stderr
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert len(modes) == 4 and set(modes.values()) == {0o666 & ~umask}, modes
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


# --- record --out: a fake nvidia-smi that plays the sections of a real capture ----------------

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
    elif args == ["pmon", "-c", "5"]: want = (state, "pmon")
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
        spelling = "--out" if state == "idle" else "--to"  # the old spelling still works
        result = run_dlrig(
            "monitor", "record", spelling, str(out), "--state", state, "--json",
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
        "monitor", "record", "--out", str(out), "--state", "load",
        env={**fake_smi, "FAKE_STATE": "load"},
    )  # fmt: skip
    assert "already has a state 'load'" in _one_line_error(again)
    assert ReplaySource([out]).frames == mine.frames  # the refused run changed nothing


def test_record_to_without_nvidia_smi_says_so(run_dlrig, tmp_path) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    result = run_dlrig(
        "monitor", "record", "--out", str(tmp_path / "x.txt"), env={"PATH": str(empty)}
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


def test_report_of_an_empty_file_leaves_it_untouched(run_dlrig, tmp_path):
    # issue 30: `monitor report` on an empty file rewrote it as a 4 KB SQLite database
    empty = tmp_path / "history.db"
    empty.write_bytes(b"")
    done = run_dlrig("monitor", "report", str(empty))
    assert done.returncode == 2 and "the file is empty" in done.stderr
    assert empty.read_bytes() == b""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert run_dlrig("monitor", "report", str(notes)).returncode == 2
    assert notes.read_text() == "my notes\n"

"""Acceptance verdicts on real recorded readings (tests/fixtures/nvidia-smi, see SOURCES.md).

Each fixture holds one known problem: the T4's PCIe link trained at x8 of x16, the RTX 3090's
power limit set to 200 W of its 350 W default, the XE9680's kernel log with Xid 119 (GSP RPC
timeout). The acceptance summary must name exactly that problem first. The H200 capture
(idle and under gpu-burn) holds none.
"""

from __future__ import annotations

import dataclasses

import pytest

from dlrig import accept
from dlrig.accept import gpu_verdicts, judge
from dlrig.accept.series import GpuTrack, LoadTrack
from dlrig.bench import BenchReport
from dlrig.errors import InputError
from dlrig.report import Status
from tests.conftest import NVSMI

T4 = str(NVSMI / "tesla-t4-2procs-q-x.xml")
RTX3090 = str(NVSMI / "rtx3090-q-x.xml")
XID = str(NVSMI / "dmesg-xid119-gsp-rpc-timeout.log")
H200 = str(NVSMI / "h200-capture-idle-load.txt")


def _replay(tmp_path, *files):
    return accept.run(accept.AcceptOptions(replay=files, out_dir=str(tmp_path / "out")))


@pytest.mark.parametrize(
    ("files", "verdict_id", "cause", "words"),
    [
        ((T4,), "burn_in.pcie", "pcie_link_degraded", "x8 of x16"),
        ((RTX3090,), "burn_in.power_limit", "gpu_throttling", "200 W, below its 350 W"),
        ((XID,), "burn_in.xid", "xid_error", "Xid 119"),
    ],
    ids=["t4-pcie-x8", "rtx3090-power-capped", "xid-kernel-log"],
)
def test_the_summary_names_the_recorded_problem_first(tmp_path, files, verdict_id, cause, words):
    run = _replay(tmp_path, *files)
    assert run.result == "fail"
    first = run.summary["problems"][0]
    assert first["status"] == "fail"
    assert first["ids"][0] == verdict_id and first["cause"] == cause
    assert words in first["title"], first["title"]
    assert first["fix"]


def test_recorded_files_of_two_machines_are_refused_before_any_verdict(tmp_path):
    # The XE9680's kernel log names its GPU at PCI 0:9b:00; the H200 capture has none there.
    with pytest.raises(InputError, match="not the same machine"):
        _replay(tmp_path, H200, XID)
    assert not (tmp_path / "out" / "accept.json").exists()


def test_doctor_findings_on_the_same_readings_join_the_burn_in_problem(tmp_path):
    run = _replay(tmp_path, T4)
    first = run.summary["problems"][0]
    assert first["ids"] == ["burn_in.pcie", "doctor.gpu.pcie_width"]
    listed = [i for p in run.summary["problems"] for i in p["ids"]]
    assert listed.count("doctor.gpu.pcie_width") == 1


def test_a_healthy_recording_passes_with_its_load_state_judged(tmp_path):
    run = _replay(tmp_path, H200)
    assert run.result == "pass", run.summary["problems"]
    verdicts = {v.id: v for v in run.verdicts}
    # The capture's load state (gpu-burn, 100% busy) at Gen5 x16 without slowdown.
    assert verdicts["burn_in.pcie"].word == "pass" and "Gen5" in verdicts["burn_in.pcie"].title
    assert verdicts["burn_in.throttle"].word == "pass"
    assert verdicts["burn_in.clock_sag"].status == "skip"  # two recorded states are no trend
    document = run.to_dict()
    assert list(document)[:2] == ["schema", "schema_version"]
    assert document["schema"] == "dlrig.accept" and document["mode"] == "replay"
    assert document["burn_in"]["gpus"][0]["labels"] == [
        "h200-capture-idle-load.txt:idle",
        "h200-capture-idle-load.txt:load",
    ]


def test_an_unreadable_replay_is_an_input_error(tmp_path):
    (tmp_path / "notes.txt").write_text("just some words\n")
    with pytest.raises(InputError):
        _replay(tmp_path, str(tmp_path / "notes.txt"))


def test_unknown_skip_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(InputError, match="--skip"):
        accept.run(accept.AcceptOptions(skip=("gpus",), out_dir=str(tmp_path / "o")))
    assert not (tmp_path / "o" / "history.db").exists()


def _h200_load_track(seconds: int, clock_at) -> GpuTrack:
    """The H200 capture's recorded load reading, once a second for `seconds`, its SM clock
    replaced by `clock_at(t)`: the rule's input has the shape of a real GPU under load."""
    from dlrig import monitor

    source = monitor.open_source(replay=[H200])
    load = next(f for f in source.frames if f.state == "load").gpus[0]
    assert load.utilization_gpu_percent == 100
    track = GpuTrack(0)
    for t in range(seconds):
        track.add(float(t), "ok", dataclasses.replace(load, sm_clock_mhz=clock_at(t)))
    return track


def test_a_clock_that_sags_over_the_burn_in_fails_and_a_steady_one_passes():
    steady = _h200_load_track(120, lambda t: 1980)
    assert gpu_verdicts.clock_sag(steady, None, replay=False).word == "pass"
    # 1980 MHz falling to 1700 MHz over two minutes: 14% lower at the end.
    sagging = _h200_load_track(120, lambda t: 1980 - int(280 * t / 119))
    verdict = gpu_verdicts.clock_sag(sagging, None, replay=False)
    assert verdict.status == "fail" and verdict.cause == "gpu_throttling"
    short = _h200_load_track(20, lambda t: 1980 - 20 * t)
    assert gpu_verdicts.clock_sag(short, None, replay=False).status == "skip"


def test_a_card_below_its_peers_fails():
    tracks = [_h200_load_track(30, lambda t: 1980) for _ in range(4)]
    for index, track in enumerate(tracks):
        track.index = index
    loads = {}
    for index, tflops in enumerate((690.0, 700.0, 695.0, 540.0)):
        load = LoadTrack("gpu", index, 1, {"tflops": "TFLOP/s"})
        for t in range(30):
            load.add(float(t), {"tflops": tflops})
        loads[index] = load
    (verdict,) = gpu_verdicts.peers(tracks, loads)
    assert verdict.status == "fail" and verdict.gpu == 3
    loads[3] = loads[0]
    (verdict,) = gpu_verdicts.peers(tracks, loads)
    assert verdict.word == "pass"


# Two results of `dlrig bench --quick --json` recorded on the project's 2-core CI machine
# (2026-12-01): the CPU's matmul (no catalogue peak: informational) and PyTorch's default
# DataLoader at a quarter of the best settings found.
RECORDED_BENCH = {
    "schema": "dlrig.bench",
    "results": [
        {
            "part": "compute",
            "test": "bf16_matmul",
            "value": 0.265,
            "unit": "TFLOP/s",
            "expected": None,
            "percent": None,
            "verdict": "info",
            "fix": None,
            "note": "best of N×N matmuls N=256,512,1024,2048 on Intel(R) Xeon(R) Processor; the "
            "catalogue has no CPU peaks",
            "cause": None,
        },
        {
            "part": "dataloader",
            "test": "default_settings",
            "value": 16.8,
            "unit": "samples/s",
            "expected": 66.6,
            "percent": 25.2,
            "verdict": "low",
            "fix": "DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2, "
            "prefetch_factor=2, persistent_workers=True, pin_memory=False)",
            "note": "DataLoader(dataset, batch_size, shuffle=True): PyTorch's defaults",
            "cause": "input_pipeline_bound",
        },
    ],
}


def test_a_software_setting_below_its_best_is_advice_not_a_failed_acceptance():
    verdicts = {v.id: v for v in judge.from_bench(BenchReport.from_dict(RECORDED_BENCH).results)}
    # no expectation for a CPU: measured, not judged (issue 23: it read "PASS 0.0006 TFLOP/s")
    matmul = verdicts["bench.compute.bf16_matmul"]
    assert matmul.status is Status.NOT_JUDGED and "not judged" in matmul.title
    assert matmul.to_dict()["status"] == "skip"  # accept's documents keep their four words
    loader = verdicts["bench.dataloader.default_settings"]
    assert loader.status == "warn" and loader.cause == "input_pipeline_bound"
    assert "num_workers=2" in loader.fix
    assert judge.summary(list(verdicts.values()))["result"] == "pass"


def test_figures_without_an_expectation_never_make_a_pass():
    only_info = {"schema": "dlrig.bench", "results": RECORDED_BENCH["results"][:1]}
    verdicts = judge.from_bench(BenchReport.from_dict(only_info).results)
    assert [v.word for v in verdicts] == ["skip"]
    assert judge.summary(verdicts)["result"] == "info"


def test_bad_input_found_after_the_out_folder_leaves_no_folder_behind(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    garbage = tmp_path / "capture.txt"
    garbage.write_text("not any tool's output\n")
    with pytest.raises(InputError):
        accept.run(accept.AcceptOptions(replay=(str(garbage),)))
    with pytest.raises(InputError, match="--skip"):
        accept.run(accept.AcceptOptions(skip=("gpus",)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["capture.txt"]
    kept = tmp_path / "mine"
    kept.mkdir()
    with pytest.raises(InputError):
        accept.run(accept.AcceptOptions(replay=(str(garbage),), out_dir=str(kept)))
    assert kept.is_dir()  # a folder the user made stays

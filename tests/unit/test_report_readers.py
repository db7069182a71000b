"""Saved documents read back as the typed reports they came from (`from_dict`), forward
compatible (a key a newer dlrig adds is dropped), and the entry points refuse the call shapes
of earlier releases instead of judging the wrong machine."""

from __future__ import annotations

import json

import pytest

from dlrig import bench, doctor, fit, profile
from dlrig.accept import report as accept_report
from dlrig.accept.verdict import Verdict
from dlrig.bench import BenchReport
from dlrig.bench.device import BenchDevice
from dlrig.doctor import DoctorReport
from dlrig.errors import InputError
from dlrig.fit.result import FitResult
from dlrig.machine import readers
from dlrig.plan.evidence import load_bench
from dlrig.profile.model import ProfileReport
from dlrig.report import Status
from tests.conftest import CORPUS, NVSMI

T4 = NVSMI / "tesla-t4-2procs-q-x.xml"  # nvidia-smi -q -x of a Tesla T4 (fixture SOURCES.md)

# Two results of `dlrig bench --quick --json` recorded on the project's 2-core CI machine
# (2026-12-01), as in test_accept_verdicts.py, with accept's per-GPU index on one.
RECORDED_RESULTS = [
    {
        "part": "compute",
        "test": "bf16_matmul",
        "value": 0.265,
        "unit": "TFLOP/s",
        "expected": None,
        "percent": None,
        "verdict": "info",
        "fix": None,
        "note": "bf16 matmul, best of 4 sizes",
        "cause": None,
        "detail": {},
    },
    {
        "part": "dataloader",
        "test": "default_settings",
        "value": 1176,
        "unit": "samples/s",
        "expected": 4665,
        "percent": 25.2,
        "verdict": "low",
        "fix": "DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2)",
        "note": "DataLoader(dataset, batch_size, shuffle=True): PyTorch's defaults",
        "cause": "input_pipeline_bound",
        "detail": {},
        "gpu_index": 1,
    },
]


def _bench_document(device_id: str | None = "h100-sxm5-80gb") -> dict:
    return {
        "schema": "dlrig.bench",
        "schema_version": 1,
        "machine": None,
        "device": {"kind": "cuda", "index": 0, "name": "NVIDIA H100", "catalogue_id": device_id},
        "results": RECORDED_RESULTS,
    }


def test_a_doctor_document_reads_back_as_the_report_it_was():
    report = doctor.run(machine=readers.load(T4))
    document = json.loads(json.dumps(report.to_dict()))
    again = DoctorReport.from_dict(document)
    assert again.to_dict() == report.to_dict()
    assert [c.status for c in again.checks] == [c.status for c in report.checks]
    assert all(isinstance(c.status, Status) and c.source == "doctor" for c in again.checks)


def test_a_newer_dlrigs_extra_keys_are_dropped_not_refused():
    document = doctor.run(machine=readers.load(T4)).to_dict()
    document["checks"][0]["confidence"] = 0.9  # a key this dlrig does not know
    document["machine"]["origin"]["site"] = "rack 4"
    again = DoctorReport.from_dict(document)
    assert "confidence" not in again.checks[0].to_dict()
    assert again.machine.origin == readers.load(T4).origin


def test_a_bench_document_round_trips_with_its_gpu_indices_and_catalogue_id():
    document = _bench_document()
    report = BenchReport.from_dict(document)
    assert [r.status for r in report.results] == [Status.NOT_JUDGED, Status.WARN]
    assert report.results[1].gpu_index == 1 and report.results[1].verdict == "low"
    assert report.to_dict() == document
    gone = _bench_document("a-gpu-this-catalogue-dropped")
    assert BenchReport.from_dict(gone).to_dict() == gone  # the id is kept as written
    assert BenchDevice.from_dict(gone["device"]).spec is None


def test_plan_upgrade_reads_only_the_results_of_a_bench_folder(tmp_path):
    document = _bench_document()
    document["machine"] = {"schema": "dlrig.machine", "what": "a newer snapshot"}
    (tmp_path / "bench.json").write_text(json.dumps(document))
    results = load_bench(tmp_path)
    assert [(r.part, r.test, r.value) for r in results] == [
        ("compute", "bf16_matmul", 0.265),
        ("dataloader", "default_settings", 1176),
    ]
    document["results"] = [{"value": 3}]  # no part, no test
    (tmp_path / "bench.json").write_text(json.dumps(document))
    with pytest.raises(InputError, match=r"bench\.json"):
        load_bench(tmp_path)


def test_accept_verdicts_read_back_in_accepts_words():
    verdict = Verdict.of("bench.compute.bf16_matmul", Status.NOT_JUDGED, "not judged", "bench")
    written = verdict.to_dict()
    assert written["status"] == "skip"
    assert Verdict.from_dict(written).to_dict() == written
    passed = Verdict.of("burn_in.pcie", "pass", "PCIe steady", "burn-in", gpu=0)
    assert passed.status is Status.OK and passed.subject == "gpu 0"
    assert Verdict.from_dict(passed.to_dict()) == passed


def test_the_call_shapes_of_earlier_releases_are_refused():
    machine = readers.load(T4)
    with pytest.raises(TypeError, match="machine="):
        doctor.run(machine)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="BenchOptions"):
        bench.run(["compute"])  # type: ignore[arg-type]


def _through_json(document: dict) -> dict:
    return json.loads(json.dumps(document))


def test_a_fit_document_reads_back_with_its_memory_and_advice():
    # the same estimate test_fit_invariants checks: it does not fit, so it carries advice
    result = fit.estimate(
        fit.Options(model="llama3-8b", gpu="t4", seq_len=1024, batch_size=1, precision="amp-fp16")
    )
    document = _through_json(result.to_dict())
    again = FitResult.from_dict(document)
    assert again.to_dict() == document
    assert again.advice and again.memory_peak_bytes == result.memory_peak_bytes
    with pytest.raises(ValueError, match=r"fit\.memory"):
        FitResult.from_dict({k: v for k, v in document.items() if k != "memory"})
    document["memory"]["peak_bytes"] = "a lot"
    with pytest.raises(ValueError, match=r"fit\.memory\.peak_bytes: expected int"):
        FitResult.from_dict(document)


@pytest.mark.parametrize(
    "trace", ["hta-trace_diff_control.json.gz", "hta-amd_mi250_minitoy_rocm6.2.json.gz"]
)
def test_a_profile_document_reads_back_as_the_report_it_was(trace):
    document = _through_json(profile.analyse([CORPUS / "kineto" / trace]).to_dict())
    assert ProfileReport.from_dict(document).to_dict() == document
    step = document["ranks"][0]["steps"][0]
    step["step_ms"] = "12"
    with pytest.raises(ValueError, match=r"profile\.ranks\[0\]\.steps\[0\]\.step_ms"):
        ProfileReport.from_dict(document)
    step["step_ms"] = None
    with pytest.raises(ValueError, match="expected a number, got None"):
        ProfileReport.from_dict(document)
    with pytest.raises(ValueError, match="ranks"):
        ProfileReport.from_dict({k: v for k, v in document.items() if k != "ranks"})


def test_the_report_page_names_a_fit_document_that_does_not_read(tmp_path):
    path = tmp_path / "fit.json"
    path.write_text(json.dumps({"schema": "dlrig.fit", "schema_version": 2, "model": "x"}))
    with pytest.raises(InputError, match="fit document"):
        accept_report.build([str(path)])


def test_a_word_from_outside_becomes_its_vocabularys_own_or_is_named():
    from dlrig.fit.options import STRATEGIES
    from dlrig.plain import word

    assert word(STRATEGIES, "fsdp", "--strategy") == "fsdp"
    with pytest.raises(ValueError, match="--strategy: 'fsdp2' is not one of ddp, zero1"):
        word(STRATEGIES, "fsdp2", "--strategy")

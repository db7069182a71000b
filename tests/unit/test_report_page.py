"""The report page built in-process from documents dlrig made from real recorded evidence
(tests/fixtures/nvidia-smi): one summary over several inputs, `--compare`, and an HTML page
that stands alone (no script, no request, no duplicate element id across the inline SVGs)."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from dlrig import accept
from dlrig.accept import report
from dlrig.errors import InputError
from tests.conftest import NVSMI

FIXTURES = {
    "t4": NVSMI / "tesla-t4-2procs-q-x.xml",
    "rtx3090": NVSMI / "rtx3090-q-x.xml",
    "xid": NVSMI / "dmesg-xid119-gsp-rpc-timeout.log",
    "h200-590": NVSMI / "h200-capture-idle-load.txt",
    "h200-580": NVSMI / "table-580.173.02-h200-idle.txt",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """accept --replay of each fixture, written as `dlrig accept` writes it."""
    folder = tmp_path_factory.mktemp("runs")
    paths = {}
    for name, evidence in FIXTURES.items():
        run = accept.run(accept.AcceptOptions(replay=(str(evidence),), out_dir=str(folder / name)))
        paths[name] = str(run.write(with_report=False)[0])
    return paths


def test_one_summary_over_several_runs_lists_each_problem_once(runs):
    page = report.build([runs["t4"], runs["rtx3090"], runs["xid"]], several_machines=True)
    assert page["schema"] == "dlrig.report" and page["result"] == "fail"
    problems = page["summary"]["problems"]
    failing = [p for p in problems if p["status"] == "fail"]
    assert [p["ids"][0] for p in failing] == ["burn_in.pcie", "burn_in.power_limit", "burn_in.xid"]
    assert all(p["status"] == "warn" for p in problems[len(failing) :])
    # Doctor's findings on the same readings are part of those problems, not listed again.
    joined = {p["ids"][0]: p["ids"][1:] for p in failing}
    assert joined == {
        "burn_in.pcie": ["doctor.gpu.pcie_width"],
        "burn_in.power_limit": ["doctor.gpu.power_limit"],
        "burn_in.xid": ["doctor.gpu.xid_events"],
    }
    # The two machines' end-of-life drivers (R515, R525) are two problems.
    eol = [p["title"] for p in problems if p["ids"] == ["doctor.driver.branch_eol"]]
    assert sorted(eol) == [
        "driver branch R515 is past end of life",
        "driver branch R525 is past end of life",
    ]


def test_compare_puts_the_machine_change_first_and_finds_nothing_in_a_rerun(runs):
    page = report.build([runs["h200-590"]], compare=runs["h200-580"])
    assert page["changes"][0] == {
        "area": "machine",
        "what": "NVIDIA driver",
        "old": "580.173.02",
        "new": "590.48.01",
        "direction": "changed",
    }
    same = report.build([runs["h200-590"]], compare=runs["h200-590"])
    assert same["changes"] == []


def test_the_page_stands_alone(runs):
    page = report.build(
        [runs["h200-590"], runs["t4"]], compare=runs["h200-580"], several_machines=True
    )
    text = report.render_html(page)
    assert "<script" not in text.lower()
    assert not re.search(r'(?:src|href)\s*=\s*"(?:https?:)?//', text), "an external resource"
    assert "<?xml" not in text and "<!DOCTYPE svg" not in text  # SVG inline, not documents
    ids = Counter(re.findall(r'\bid="([^"]+)"', text))
    assert [i for i, n in ids.items() if n > 1] == []
    assert text.count('<figure class="chart"') == 3  # the H200's clock, temperature, power
    assert text.index('id="changes"') < text.index('id="summary"') < text.index('id="machine"')


def test_files_of_two_machines_are_refused_unless_asked_for(runs):
    # issue 23: two machines' runs were merged into one page under the first one's name
    with pytest.raises(InputError, match="different machines"):
        report.build([runs["t4"], runs["rtx3090"]])
    page = report.build([runs["t4"], runs["rtx3090"]], several_machines=True)
    assert page["title"].startswith("2 machines (")


def test_an_unknown_schema_version_is_refused(tmp_path):
    newer = tmp_path / "bench.json"
    newer.write_text(json.dumps({"schema": "dlrig.bench", "schema_version": 99, "results": []}))
    with pytest.raises(InputError, match="schema_version 99"):
        report.build([str(newer)])


def test_a_document_with_nothing_in_it_is_not_a_pass(tmp_path):
    empty = tmp_path / "bench.json"
    empty.write_text(json.dumps({"schema": "dlrig.bench", "schema_version": 1, "results": []}))
    assert report.build([str(empty)])["result"] == "info"


def test_the_versions_read_are_the_writers_versions():
    from dlrig import accept, bench, doctor, profile
    from dlrig.accept.report import inputs
    from dlrig.fit import result as fit_result
    from dlrig.machine import model as machine_model
    from dlrig.monitor import history, sample
    from dlrig.monitor import report as monitor_report

    assert inputs.VERSIONS == {
        "dlrig.accept": accept.SCHEMA_VERSION,
        "dlrig.doctor": doctor.SCHEMA_VERSION,
        "dlrig.machine": machine_model.SCHEMA_VERSION,
        "dlrig.bench": bench.SCHEMA_VERSION,
        "dlrig.fit": fit_result.SCHEMA_VERSION,
        "dlrig.monitor.report": monitor_report.SCHEMA_VERSION,
        "dlrig.monitor.sample": sample.SCHEMA_VERSION,
        inputs.HISTORY_SCHEMA: history.SCHEMA_VERSION,
        "dlrig.profile": profile.SCHEMA_VERSION,
    }


def test_a_profile_gets_its_verdict_and_a_bar_per_step(tmp_path):
    """`dlrig profile --json` of a recorded A100 trace: the verdict joins the summary as a
    warning, and the page draws each profiled step as a stacked bar of the GPU's time."""
    from dlrig import profile
    from tests.conftest import CORPUS

    document = profile.analyse([CORPUS / "kineto" / "hta-trace_diff_control.json.gz"]).to_dict()
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(document))
    page = report.build([str(path)])
    assert page["summary"]["problems"][0]["cause"] == "communication_exposed"
    section = page["profiles"][0]
    bars = section["ranks"][0]["bars"]
    assert [b["name"] for b in bars] == [s["name"] for s in document["ranks"][0]["steps"]]
    longest = max(b["step_ms"] for b in bars)
    for bar in bars:  # each bar's parts add up to its step, scaled to the longest step
        assert sum(p["width"] for p in bar["parts"]) == pytest.approx(
            100 * bar["step_ms"] / longest, rel=1e-3
        )
    html = report.render_html(page)
    assert html.count('class="step-bar"') == len(bars)
    assert "Profile: where each step" in html

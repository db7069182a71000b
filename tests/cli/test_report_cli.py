"""`dlrig report`: one page from saved dlrig documents, on the real console script.

The documents are made by dlrig itself from real recorded evidence (tests/fixtures/nvidia-smi):
`accept --replay` (through its Python API, which writes the document the command writes;
`dlrig accept` itself is tested in test_accept_cli.py), `doctor --from`/`--save`, `fit
--json`, `monitor record --db` and `monitor report --json`.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import NVSMI, ROOT

T4 = str(NVSMI / "tesla-t4-2procs-q-x.xml")
RTX3090 = str(NVSMI / "rtx3090-q-x.xml")
XID = str(NVSMI / "dmesg-xid119-gsp-rpc-timeout.log")
H200_590 = str(NVSMI / "h200-capture-idle-load.txt")  # driver 590.48.01
H200_580 = str(NVSMI / "table-580.173.02-h200-idle.txt")  # the same model on driver 580.173.02


def _accept(tmp_path, name, *files):
    """accept.json of `dlrig accept --replay FILES --out DIR` (without its page: the page
    under test is the one `dlrig report` makes)."""
    from dlrig import accept

    run = accept.run(accept.AcceptOptions(replay=tuple(files), out_dir=str(tmp_path / name)))
    return run.write(with_report=False)[0]


def _dlrig_at_once(*commands: tuple[str, ...]) -> list[subprocess.CompletedProcess[str]]:
    """Several independent dlrig commands run side by side (each its own process)."""
    env = {k: v for k, v in os.environ.items() if k != "DLRIG_DEBUG"}
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "dlrig.cli.main", *command],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        for command in commands
    ]
    done = []
    for process, command in zip(started, commands, strict=True):
        stdout, stderr = process.communicate(timeout=240)
        done.append(subprocess.CompletedProcess(command, process.returncode, stdout, stderr))
    return done


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", fragment))


def _first_problem(page_html: str) -> str:
    summary = page_html.split('id="summary"', 1)[1]
    item = re.search(
        r'<li class="problem[^"]*">(.*?)</li>\s*(?:<li class="problem|</ol>)', summary, re.S
    )
    assert item, "no problem listed in the summary"
    return " ".join(_text(item.group(1)).split())


@pytest.mark.parametrize(
    ("files", "words"),
    [((T4,), "x8 of x16"), ((RTX3090,), "power-capped at 200 W"), ((XID,), "Xid 119")],
    ids=["t4-pcie-x8", "rtx3090-power-capped", "xid-119"],
)
def test_the_page_summary_names_the_recorded_problem_first(run_dlrig, tmp_path, files, words):
    document = _accept(tmp_path, "run", *files)
    page = tmp_path / "page.html"
    done = run_dlrig("report", str(document), "--out", str(page))
    assert done.returncode == 1, done.stderr  # the summary has a failing item
    text = page.read_text()
    assert words in _first_problem(text)
    assert (
        "<script" not in text.lower()
        and "http://" not in text
        and "https://" not in text.split("<body", 1)[0]
    )
    assert text.index('id="summary"') < text.index('class="burn-in"')


def test_compare_shows_the_driver_change_at_the_top(run_dlrig, tmp_path):
    old = _accept(tmp_path, "old", H200_580)
    new = _accept(tmp_path, "new", H200_590)
    page = tmp_path / "page.html"
    done = run_dlrig("report", str(new), "--compare", str(old), "--out", str(page), "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert document["schema"] == "dlrig.report"
    first = document["changes"][0]
    assert (first["what"], first["old"], first["new"]) == (
        "NVIDIA driver",
        "580.173.02",
        "590.48.01",
    )
    text = page.read_text()
    body = text.split("<body>", 1)[1]
    # The comparison is the first section of the page, and its first row is the driver.
    assert body.index('id="changes"') < body.index('id="summary"')
    assert re.search(r"<section[^>]*>", body).group(0) == '<section id="changes" class="box">'
    first_row = _text(body.split('id="changes"', 1)[1].split("</tr>", 2)[1])
    assert "NVIDIA driver" in first_row and "580.173.02" in first_row and "590.48.01" in first_row


def test_every_kind_of_saved_document_goes_into_one_page(run_dlrig, tmp_path):
    doctor = tmp_path / "doctor.json"
    snapshot = tmp_path / "box.json"
    fit = tmp_path / "fit.json"
    db = tmp_path / "history.db"
    made = _dlrig_at_once(
        ("doctor", "--from", T4, "--json"),
        ("doctor", "--from", RTX3090, "--save", str(snapshot)),
        ("fit", "llama3-8b", "--gpu", "t4", "--analytic", "--json"),
        (
            "monitor",
            "record",
            "--replay",
            H200_590,
            "--frame-seconds",
            "0.5",
            "--interval",
            "0.1",
            "--db",
            str(db),
            "--duration",
            "2",
        ),
    )
    doctor.write_text(made[0].stdout)
    fit.write_text(made[2].stdout)
    assert made[3].returncode == 0, made[3].stderr
    history_report = tmp_path / "history-report.json"
    history_report.write_text(run_dlrig("monitor", "report", str(db), "--json").stdout)
    page = tmp_path / "page.html"
    done = run_dlrig(
        "report",
        str(doctor),
        str(snapshot),
        str(fit),
        str(db),
        str(history_report),
        "--out",
        str(page),
        "--json",
        "--several-machines",  # a T4 box and an RTX 3090 snapshot: named in the title
    )
    assert done.returncode == 0, done.stderr  # warnings only: doctor's, and the fit that does not
    document = json.loads(done.stdout)
    assert [i["schema"] for i in document["inputs"]] == [
        "dlrig.doctor",
        "dlrig.machine",
        "dlrig.fit",
        "dlrig.monitor.history",
        "dlrig.monitor.report",
    ]
    assert len(document["doctor"]) == 2  # the snapshot is judged by doctor's checks too
    assert document["fits"][0]["fits"] is False
    assert document["monitor"][0]["gpus"][0]["t"], "the history's time series"
    ids = [i for p in document["summary"]["problems"] for i in p["ids"]]
    assert "fit.fits" in ids and "doctor.gpu.pcie_width" in ids and "doctor.gpu.power_limit" in ids
    text = page.read_text()
    for anchor in (
        'id="doctor-0"',
        'id="doctor-1"',
        'id="fit-0"',
        'id="monitor-0"',
        'id="machine"',
    ):
        assert anchor in text
    assert text.count('<figure class="chart"') >= 4


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("not json at all", "not JSON"),
        ('{"results": []}', "not a dlrig document"),
        (None, "no such file"),
    ],
    ids=["not-json", "no-schema", "missing"],
)
def test_an_input_that_is_not_a_dlrig_document_is_one_line_and_exit_2(
    run_dlrig, tmp_path, content, words
):
    path = tmp_path / "input.json"
    if content is not None:
        path.write_text(content)
    done = run_dlrig("report", str(path), "--out", str(tmp_path / "page.html"))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in done.stderr
    assert not (tmp_path / "page.html").exists()

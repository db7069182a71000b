"""Real `collect_env` pastes from public bug reports: doctor names the cause each thread confirmed.

tests/corpus/collect_env/manifest.csv labels every paste with the problem its thread confirmed
and the thread's address; `none` means the environment was confirmed fine.
"""

from __future__ import annotations

import csv

import pytest

from dlrig import doctor
from dlrig.machine import readers
from dlrig.report import Status
from tests.conftest import CORPUS

FOLDER = CORPUS / "collect_env"
ROWS = list(csv.DictReader((FOLDER / "manifest.csv").open(encoding="utf-8")))


def test_corpus_is_large_enough_and_labelled():
    assert len(ROWS) >= 10
    for row in ROWS:
        assert row["url"].startswith("https://github.com/"), row
        assert row["confirmation"].strip(), row
        assert (FOLDER / row["file"]).is_file(), row


@pytest.mark.parametrize("row", ROWS, ids=[r["file"] for r in ROWS])
def test_doctor_names_the_confirmed_cause(row):
    machine = readers.load(FOLDER / row["file"])
    assert machine.origin.kind == "collect-env"
    report = doctor.run(machine)
    failing_causes = {r.cause for r in report.checks if r.status is Status.FAIL and r.cause}
    if row["expected_cause"] == "none":
        assert not failing_causes, [r.title for r in report.checks if r.status is Status.FAIL]
    else:
        assert row["expected_cause"] in failing_causes, [
            (r.id, r.status.value, r.title)
            for r in report.checks
            if r.status in (Status.FAIL, Status.WARN)
        ]


def test_messy_paste_with_full_width_colons_and_no_colon():
    machine = readers.load(FOLDER / "driver410-torch150-cu102-fullwidth-colons.txt")
    # "PyTorch version 1.5.0" (no colon), "GPU 0： Tesla P100-PCIE-16GB" (full-width colons)
    assert machine.frameworks.torch.version == "1.5.0"
    assert [g.name for g in machine.gpus] == ["Tesla P100-PCIE-16GB"] * 4
    assert machine.driver.version == "410.104"


def test_warning_inside_output_gives_arch_list_and_capability():
    machine = readers.load(FOLDER / "sm120-rtx5090d-cu126.txt")
    torch = machine.frameworks.torch
    assert torch.arch_list[-1] == "sm_90"
    assert machine.gpus[0].compute_capability == "12.0"


def test_driver_too_old_warning_gives_driver_cuda():
    machine = readers.load(FOLDER / "driver470-torch210-cu121-warning.txt")
    # "...too old (found version 11040)" -> the driver supports CUDA 11.4
    assert machine.driver.cuda_version == "11.4"

"""Other wordings of known causes, from real threads (tests/corpus/logs/variants.csv): the
TensorFlow, Keras, JAX, ROCm, Windows, uv/Poetry and scheduler words for failures the vocabulary
first learnt from PyTorch on Linux. Rule tests: they count in no accuracy figure."""

from __future__ import annotations

import csv

import pytest

from dlrig import diagnose
from tests.conftest import CORPUS

LOGS = CORPUS / "logs"
ROWS = list(csv.DictReader((LOGS / "variants.csv").open(encoding="utf-8")))


def test_the_variant_list_is_whole():
    assert len(ROWS) >= 200
    assert all((LOGS / row["file"]).is_file() for row in ROWS)
    assert len({row["cause"] for row in ROWS}) >= 50


@pytest.mark.parametrize("row", ROWS, ids=[row["file"] for row in ROWS])
def test_each_wording_names_its_cause(row: dict[str, str]) -> None:
    root = diagnose.diagnose_paths([LOGS / row["file"]]).root
    assert root is not None and root.cause == row["cause"], row["file"]
    assert root.confidence >= 0.5

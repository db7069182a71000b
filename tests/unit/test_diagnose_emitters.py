"""Error messages of other frameworks and tools (ONNX Runtime, TensorRT, llama.cpp, ollama,
SGLang, TGI, XLA, Paddle, ROCm, Slurm, NumPy 2, Keras 3, ...) for causes in the vocabulary, each
as a user pasted it (tests/corpus/emitters/README.md): diagnose names the cause from the pasted
lines alone."""

from __future__ import annotations

import csv
import re

import pytest

from dlrig import diagnose
from tests.conftest import CORPUS

FOLDER = CORPUS / "emitters"
ROWS = list(csv.DictReader((FOLDER / "manifest.csv").open(encoding="utf-8")))
# No cause in the vocabulary says these, and two are INFO lines with no failure after them.
NO_CAUSE = {
    "16": "ollama's INFO 'no compatible GPUs were discovered' (it runs on the CPU)",
    "56": "TensorFlow's INFO 'Could not find cuda drivers on your machine'",
    "65": "vLLM's bf16 check on a pre-Ampere GPU: the vocabulary has no 'dtype unsupported' cause",
}


def _number(row: dict[str, str]) -> str:
    return str(int(row["file"].split("-")[0]))


def _pasted(row: dict[str, str]) -> list[str]:
    """The pasted error text in pieces: the manifest elides text with ' ... ' and joins lines
    with ' / ' (an elided path, "...\\x.dll", stays as written)."""
    pieces = re.split(r"\s+(?:\.\.\.|…)\s+|\s+/\s+", row["pasted"])
    return [p.strip() for p in pieces if len(p.strip()) >= 12]


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=NO_CAUSE[_number(r)]))
        if _number(r) in NO_CAUSE
        else r
        for r in ROWS
    ],
    ids=[r["file"] for r in ROWS],
)
def test_the_pasted_message_names_its_cause(row: dict[str, str], tmp_path) -> None:
    root = _root(row, tmp_path)
    assert root is not None, row["file"]
    assert root.cause in row["cause"].split("|"), (row["file"], root.cause)


def _root(row: dict[str, str], folder) -> diagnose.Finding | None:
    """The root cause of a log holding only the pasted pieces, one per line."""
    log = folder / f"{_number(row)}.log"
    log.write_text("\n".join(_pasted(row)) + "\n", encoding="utf-8")
    return diagnose.diagnose_paths([log]).root


def test_the_set_and_its_figures(tmp_path) -> None:
    assert len(ROWS) == 73 and all(r["issue_url"].startswith("https://github.com/") for r in ROWS)
    named = confident = 0
    for row in ROWS:
        root = _root(row, tmp_path)
        if root is not None and root.cause in row["cause"].split("|"):
            named += 1
            confident += root.confidence >= 0.5
    print(f"\nemitter messages: {named}/{len(ROWS)} named right, {confident} with confidence")
    assert named >= 70 and confident >= 65

"""Every doctor check id that text in src/ points the user at exists.

Reports once told users to "see env.cuda_visible_devices", a check that never existed. This
scans every string of the code that reports or points at doctor checks (doctor, diagnose, the
cause vocabulary, the CLI, the report model) and the TOML data (signatures) for words shaped
like a check id (`area.name`) and looks each up in the registry. Other commands use the same
dotted shape for their own names (plan's `storage.throughput` rule, buildspec keys such as
`storage.count`), so their modules are not scanned.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from dlrig import doctor
from dlrig.doctor.registry import AREAS

SRC = Path(__file__).resolve().parents[2] / "src" / "dlrig"
# "env." is not an area, but it is the prefix the wrong reference used.
_ID = re.compile(r"(?<![\w./-])(?:" + "|".join((*AREAS, "env")) + r")\.[a-z][a-z0-9_]*(?![\w(/-])")
_FILE_SUFFIXES = {
    "conf",
    "png",
    "py",
    "json",
    "csv",
    "toml",
    "md",
    "txt",
    "log",
    "xml",
    "html",
    "so",
    "h",  # C headers: nccl.h is a file, not the check area nccl
}


def _strings(path: Path) -> list[str]:
    if path.suffix == ".py":
        tree = ast.parse(path.read_text(encoding="utf-8"))
        return [
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        ]
    return [path.read_text(encoding="utf-8")]


SCANNED = ("doctor", "diagnose", "cli", "knowledge/data", "causes", "report.py", "machine")


def _scanned(path: Path) -> bool:
    relative = path.relative_to(SRC).as_posix()
    return any(relative == s or relative.startswith(s + "/") for s in SCANNED)


def referenced_ids() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in SRC.rglob("*"):
        if path.suffix not in {".py", ".toml"} or not path.is_file() or not _scanned(path):
            continue
        for text in _strings(path):
            for match in _ID.finditer(text):
                token = match.group(0)
                if token.rsplit(".", 1)[1] in _FILE_SUFFIXES:
                    continue
                found.setdefault(token, set()).add(str(path.relative_to(SRC)))
    return found


def test_every_referenced_check_id_exists():
    ids = {c.id for c in doctor.all_checks()}
    references = referenced_ids()
    assert references, "the scan found no check ids at all: the pattern is broken"
    missing = {token: sorted(files) for token, files in references.items() if token not in ids}
    assert not missing, missing


def test_the_scan_would_catch_the_old_wrong_reference():
    assert (
        _ID.search("see driver.torch_cuda and env.cuda_visible_devices").group(0)
        == "driver.torch_cuda"
    )
    assert [m.group(0) for m in _ID.finditer("see env.cuda_visible_devices for")] == [
        "env.cuda_visible_devices"
    ]
    assert "env.cuda_visible_devices" not in {c.id for c in doctor.all_checks()}

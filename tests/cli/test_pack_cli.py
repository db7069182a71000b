"""`dlrig pack`, `pack verify` and `pack bench` from the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.unit.test_pack_trees import make_tree

PROGRESS = re.compile(r"^dlrig: +\d+% ")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    make_tree(tmp_path / "src", classes=2, per_class=25)
    return tmp_path / "src"


@pytest.mark.parametrize("args", [["pack", "--help"], ["pack", "create", "--help"],
                                  ["pack", "verify", "--help"], ["pack", "bench", "--help"]])  # fmt: skip
def test_every_help_ends_with_exit_codes(run_dlrig, args: list[str]) -> None:
    result = run_dlrig(*args)
    assert result.returncode == 0
    last = result.stdout.strip().split("\n\n")[-1]
    assert last.strip().startswith("Exit codes:"), result.stdout


def test_options_before_or_after_the_arguments_and_json_documents(run_dlrig, tree: Path) -> None:
    dst = tree.parent / "dst"
    first = run_dlrig("pack", "--json", "--shard-size", "30k", str(tree), str(dst))
    assert first.returncode == 0, first.stderr
    document = json.loads(first.stdout)
    assert list(document)[:3] == ["schema", "schema_version", "command"]
    assert document["schema"] == "dlrig.pack" and document["command"] == "pack"
    assert document["samples"] == 50 and document["shards"] >= 3
    assert document["shard_size_reason"] == "--shard-size" and document["fstype"]
    again = run_dlrig(
        "pack", str(tree), str(dst), "--overwrite", "--format", "webdataset", "--json"
    )
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["format"] == "webdataset"
    assert sorted(p.suffix for p in (dst / "shards").iterdir())[-1] == ".tar"
    verified = run_dlrig("pack", "--json", "verify", str(dst))
    assert verified.returncode == 0, verified.stderr
    report = json.loads(verified.stdout)
    assert report["command"] == "verify" and report["ok"] and report["samples_checked"] == 50


def test_text_reports(run_dlrig, tree: Path) -> None:
    dst = tree.parent / "dst"
    packed = run_dlrig("pack", str(tree), str(dst), "--no-shuffle")
    assert packed.returncode == 0, packed.stderr
    assert "packed 50 samples" in packed.stdout and f"dlrig pack verify {dst}" in packed.stdout
    verified = run_dlrig("pack", "verify", str(dst))
    assert verified.returncode == 0 and "intact" in verified.stdout


def test_bench_measures_the_pack_against_its_loose_files(run_dlrig, tree: Path) -> None:
    dst = tree.parent / "dst"
    assert run_dlrig("pack", str(tree), str(dst), "--shard-size", "30k").returncode == 0
    result = run_dlrig("pack", "bench", str(dst), "--json", "--decode-samples", "20")
    assert result.returncode in (0, 1), result.stderr  # 1: below the 5x target on this disk
    document = json.loads(result.stdout)
    assert document["schema"] == "dlrig.pack" and document["command"] == "bench"
    cases = [r for r in document["results"] if r["unit"] == "samples/s"]
    readers = {r["detail"]["reader"] for r in cases}
    assert readers == {"loose", "dlrig-map", "dlrig-stream"}
    assert {r["detail"]["cache"] for r in cases} == {"cold", "warm"}
    assert all(r["detail"]["cache_verified"] for r in cases), [r["note"] for r in cases]
    assert all(r["value"] > 0 for r in cases)
    speedups = {r["test"]: r for r in document["results"] if r["unit"] == "x"}
    assert speedups["speedup_raw_cold_1p"]["expected"] == 5.0
    assert (result.returncode == 1) == (speedups["speedup_raw_cold_1p"]["verdict"] == "low")
    text = run_dlrig("pack", "bench", str(dst), "--no-decode", "--samples", "10")
    assert "packed vs loose" in text.stdout and "speedup_raw_cold_1p" in text.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pack", "SRC", "DST", "--shard-size", "big"], "--shard-size 'big' is not a size"),
        (["pack", "SRC", "DST", "--jobs", "0"], "--jobs 0: needs at least 1"),
        (["pack", "verify", "NOPE"], "NOPE: not a dlrig pack (no manifest.json)"),
        (["pack", "bench", "NOPE"], "NOPE: not a dlrig pack (no manifest.json)"),
        (["pack", "bench", "DST", "--workers", "0"], "--workers 0: needs at least 1"),
        (["pack", "SRC", "DST", "--extensions", ","], "names no extension"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(
    run_dlrig, tree: Path, args: list[str], message: str
) -> None:
    args = [
        str(tree) if a == "SRC" else str(tree.parent / "dst") if a == "DST" else a for a in args
    ]
    result = run_dlrig(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    # Progress lines (off a terminal, after a second) come before the error; the error is one.
    lines = [line for line in result.stderr.strip().splitlines() if not PROGRESS.match(line)]
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_an_unfinished_pack_is_not_read_and_other_settings_do_not_resume_it(
    run_dlrig, tree: Path
) -> None:
    dst = tree.parent / "dst"
    dst.mkdir()
    (dst / ".dlrig-pack-plan.json").write_text(
        json.dumps(
            {
                "format": "dlrig", "source_kind": "imagefolder", "source_location": "/elsewhere",
                "fingerprint": "0", "total": 3, "samples_per_shard": 1, "seed": 0,
                "skip_bad": False, "version": 1,
            }
        )
    )  # fmt: skip
    result = run_dlrig("pack", "verify", str(dst))
    assert result.returncode == 2 and "the pack is not finished" in result.stderr
    result = run_dlrig("pack", str(tree), str(dst))
    assert result.returncode == 2
    assert "holds an unfinished pack made with other settings" in result.stderr
    assert "fingerprint, source_location, total differ" in result.stderr
    assert run_dlrig("pack", str(tree), str(dst), "--overwrite").returncode == 0


def test_the_bench_command_has_a_pack_part(run_dlrig, tree: Path) -> None:
    dst = tree.parent / "dst"
    assert run_dlrig("pack", str(tree), str(dst)).returncode == 0
    result = run_dlrig("bench", "pack", "--quick", "--json", "--path", str(dst))
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout)["results"]
    assert {r["part"] for r in results} == {"pack"}
    assert any(r["test"] == "speedup_raw_cold_1p" for r in results)
    skipped = json.loads(run_dlrig("bench", "pack", "--json").stdout)["results"]
    assert [(r["test"], r["verdict"]) for r in skipped] == [("read", "skip")]


def test_an_empty_file_is_refused_or_left_out_never_packed(run_dlrig, tree: Path) -> None:
    # Before, a zero-byte "JPEG" was packed and then verified as intact.
    empty = tree / sorted(p.name for p in tree.iterdir())[0] / "zz-empty.jpg"
    empty.write_bytes(b"")
    refused = run_dlrig("pack", str(tree), str(tree.parent / "a"))
    assert refused.returncode == 2
    assert f"{empty}: an empty sample (0 bytes)" in refused.stderr
    assert "--skip-bad" in refused.stderr
    skipped = run_dlrig("pack", "--json", "--skip-bad", str(tree), str(tree.parent / "b"))
    assert skipped.returncode == 0, skipped.stderr
    document = json.loads(skipped.stdout)
    assert document["samples"] == 50, document  # the 50 images of the tree, not the empty file
    verified = run_dlrig("pack", "--json", "verify", str(tree.parent / "b"))
    assert json.loads(verified.stdout)["ok"] is True

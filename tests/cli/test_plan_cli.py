"""`dlrig plan` from the command line: ranking with --json and --out, check, cost, upgrade,
options before or after arguments, and one-line answers to bad input."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import NVSMI, ROOT

BUILDS = ROOT / "tests" / "data" / "builds"
H200 = NVSMI / "h200-capture-idle-load.txt"
T4 = NVSMI / "tesla-t4-2procs-q-x.xml"


def _one_line_error(result: subprocess.CompletedProcess[str], code: int = 2) -> str:
    assert result.returncode == code, (result.stdout[-2000:], result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def test_plan_ranks_options_best_first_and_writes_json_and_png(run_dlrig, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_dlrig(
        "plan", "--json", "--out", str(out), "gpt2:tokens=2B,every=week,deadline=12h",
        "--circuit", "230V16A", "--max-gpus", "4", timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert list(document)[:2] == ["schema", "schema_version"] and document["schema"] == "dlrig.plan"
    options = document["options"]
    assert options and options[0]["feasible"]
    for option in options[:5]:
        for key in (
            "kind",
            "gpu",
            "count",
            "fits",
            "time_per_workload_s",
            "capex_usd",
            "energy_cost_usd_per_year",
            "tco_usd",
            "cost_per_run_usd",
        ):
            assert key in option, key
    feasible = [o for o in options if o["feasible"]]
    assert [o["tco_usd"] for o in feasible] == sorted(o["tco_usd"] for o in feasible)
    assert all(o["count"] <= 4 for o in options)
    kinds = {o["kind"] for o in options}
    assert kinds == {"build", "cloud"}
    builds = [o for o in options if o["kind"] == "build"]
    assert all(
        o["power_wall_watts"] and o["build"]["psu"] and o["build"]["cpu"]["pcie_lanes"]
        for o in builds
    )
    # a build over the 230 V 16 A circuit is not feasible, and says why
    assert any("power.circuit" in " ".join(o["reasons"]) for o in builds)
    # the deadline of 12 hours rules out slow options
    assert any("deadline" in " ".join(o["reasons"]) for o in options)
    assert document["traces"] <= 2 and len(document["catalogue"]) >= 4 * 38
    labelled = {i["name"]: i for i in document["inputs"]}
    assert labelled["spot_discount"]["assumption"] is True
    assert json.loads((out / "plan.json").read_text())["options"][0]["label"] == options[0]["label"]
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plan_text_report_and_no_feasible_option(run_dlrig) -> None:
    result = run_dlrig(
        "plan", "gpt2:tokens=2B", "--budget", "1", "--no-cloud", "--gpu", "rtx-4090", timeout=300
    )
    assert result.returncode == 1, result.stderr
    assert "no option meets every constraint" in result.stdout
    assert "capex USD" in result.stdout and "> budget USD 1" in result.stdout
    assert "ASSUMPTIONS" in result.stdout


@pytest.mark.parametrize(
    "build", ["puget-quad-rtx3090", "lambda-quad-rtx3090", "dettmers-4gpu-1400w", "dgx-h100"]
)
def test_check_exit_code_and_json_in_both_orders(run_dlrig, build: str) -> None:
    path = str(BUILDS / f"{build}.yaml")
    first, second = (
        run_dlrig("plan", "check", "--json", path),
        run_dlrig("plan", "check", path, "--json"),
    )
    assert first.returncode == second.returncode
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a == b and a["schema"] == "dlrig.plan.check"
    assert first.returncode == (1 if a["failed"] else 0)
    text = run_dlrig("plan", "check", path)
    assert ("rule(s) failed" in text.stdout) == bool(a["failed"])


def test_cost_and_upgrade_from_recorded_evidence(run_dlrig, tmp_path: Path) -> None:
    db = tmp_path / "h.db"
    record = run_dlrig(
        "monitor",
        "record",
        "--db",
        str(db),
        "--replay",
        str(H200),
        "--interval",
        "0.05",
        "--frame-seconds",
        "0.5",
        "--duration",
        "2",
    )
    assert record.returncode == 0, record.stderr
    result = run_dlrig(
        "plan",
        "cost",
        "--history",
        str(db),
        "--json",
        "--price-per-kwh",
        "0.30",
        "--min-idle-minutes",
        "0.005",
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["schema"] == "dlrig.plan.cost" and document["price_per_kwh"] == 0.30
    assert {s["name"] for s in document["savings"]} == {
        "night sleep over IPMI",
        "GPU sharing",
        "bursty jobs to spot",
    }
    text = run_dlrig("plan", "cost", "--history", str(db))
    assert "EXTRAPOLATED" in text.stdout and "savings on this history" in text.stdout
    upgrade = run_dlrig("plan", "upgrade", "--machine", str(H200), "--history", str(db), "--json")
    assert upgrade.returncode == 0, upgrade.stderr
    document = json.loads(upgrade.stdout)
    assert document["schema"] == "dlrig.plan.upgrade" and document["gpu"] == "h200-sxm-141gb"
    assert {lim["area"] for lim in document["limits"]} == {
        "input pipeline",
        "GPU memory",
        "compute",
        "interconnect",
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["plan", "resnet50:epoch=90"], "not KEY=VALUE with a known key"),
        (["plan", "resnet50", "--circuit", "lots"], "--circuit 'lots'"),
        (["plan", "resnet50", "--utilisation", "2"], "--utilisation 2.0 is not between 0 and 1"),
        (["plan", "resnet50", "--assume", "spot=0.5"], "--assume spot: no such assumption"),
        (["plan", "resnet50", "--gpu", "rtx-9999"], "not in the GPU catalogue"),
        # issue 24: each of these made every TCO after it meaningless (--years 0 divided by 0)
        (["plan", "resnet50", "--years", "0"], "--years=0.0 is outside (0,inf)"),
        (["plan", "resnet50", "--assume", "spot_discount=5"], "spot_discount=5 is outside [0,1]"),
        (["plan", "resnet50", "--pue", "0.9"], "--pue=0.9 is outside [1,inf)"),
        (["plan", "resnet50", "--budget", "-100"], "--budget -100 is not a sum of money"),
        (["plan", "cost", "--history", "x.db", "--pue", "0"], "--pue=0.0 is outside [1,inf)"),
        (["plan", "/nonexistent/w.yaml"], "cannot read"),
        (["plan", "check", "/nonexistent/build.yaml"], "no such build file"),
        (["plan", "cost", "--history", "/nonexistent.db"], "no such history database"),
        (["plan", "upgrade", "--machine", "/nonexistent/box.json"], "/nonexistent/box.json"),
        (["plan", "upgrade", "--machine", str(T4), "--bench", "/nonexistent"], "no bench.json"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(run_dlrig, args: list[str], message: str) -> None:
    line = _one_line_error(run_dlrig(*args))
    assert message in line


def test_help_ends_with_exit_codes(run_dlrig) -> None:
    for args in (
        ["plan", "--help"],
        ["plan", "workloads", "--help"],
        ["plan", "check", "--help"],
        ["plan", "cost", "--help"],
        ["plan", "upgrade", "--help"],
    ):
        result = run_dlrig(*args)
        assert result.returncode == 0 and "Exit codes:" in result.stdout, args
    assert "resnet50:epochs=90" in run_dlrig("plan", "workloads", "--help").stdout

"""`plan cost` and `plan upgrade` on real evidence: a history recorded by `dlrig monitor record`
replaying real nvidia-smi captures, machine snapshots from real `nvidia-smi -q -x` files, and a
`dlrig bench --out` folder measured on this machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dlrig.errors import InputError
from dlrig.machine import readers
from dlrig.machine.readers import nvsmi_capture
from dlrig.plan.assume import Inputs
from dlrig.plan.evidence import load_bench
from dlrig.plan.savings import cost
from dlrig.plan.upgrade import upgrade
from dlrig.plan.usage import read
from tests.conftest import NVSMI, ROOT

# Records a history and a storage run with the real dlrig CLI: the slow tier.
pytestmark = pytest.mark.slow

H200 = NVSMI / "h200-capture-idle-load.txt"
T4 = NVSMI / "tesla-t4-2procs-q-x.xml"


def _dlrig(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dlrig.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four replicated H200s alternating between the capture's idle and load states."""
    db = tmp_path_factory.mktemp("history") / "h.db"
    result = _dlrig(
        "monitor",
        "record",
        "--db",
        str(db),
        "--replay",
        str(H200),
        "--replicate",
        "4",
        "--interval",
        "0.05",
        "--frame-seconds",
        "0.5",
        "--duration",
        "3",
    )
    assert result.returncode == 0, result.stderr
    return db


def _capture_power(state: str) -> float:
    sections = nvsmi_capture.split_sections(H200.read_text())[1]
    [gpu] = nvsmi_capture.gpus_for_state(sections, state)
    assert gpu.power_draw_watts is not None
    return gpu.power_draw_watts


def test_usage_matches_the_recorded_capture(history: Path) -> None:
    usage = read(history)
    assert len(usage.gpus) == 4 and {g.catalogue_id for g in usage.gpus} == {"h200-sxm-141gb"}
    for gpu in usage.gpus:
        assert gpu.idle_power_watts == pytest.approx(_capture_power("idle"), rel=0.01)
        assert gpu.busy_power_watts == pytest.approx(_capture_power("load"), rel=0.01)
    # the replay spends half its frames in each state
    assert 0.3 < usage.busy_fraction < 0.7
    assert usage.idle_periods


def test_cost_and_savings_on_this_history(history: Path) -> None:
    report = cost(history, Inputs(), min_idle_minutes=0.005)
    usage = report.usage
    hours = usage.seconds / 3600
    gpu_kwh = sum(g.energy_kwh for g in usage.gpus)
    assert report.energy_kwh == pytest.approx((gpu_kwh + 100 * hours / 1000) * 1.5)
    assert report.cost_usd == pytest.approx(report.energy_kwh * 0.13)
    assert report.cost_year_usd == pytest.approx(report.cost_usd * 8760 / hours)
    savings = {s.name: s for s in report.savings}
    sleep = savings["night sleep over IPMI"]
    assert sleep.usd_per_year > 0 and "ipmitool" in " ".join(sleep.detail)
    # ~2 GPUs' worth of work on 4 GPUs at 80% packing needs 3: one GPU freed
    sharing = savings["GPU sharing"]
    assert "freeing 1" in sharing.summary and sharing.usd_per_year > 0
    # busy about half the time: at the bursty threshold (50%) or just under; either way the
    # report says what spot would cost against owning
    assert "busy" in savings["bursty jobs to spot"].summary
    document = report.to_dict()
    assert document["schema"] == "dlrig.plan.cost" and document["extrapolated"] is True
    assert any(i["name"] == "standby_watts" and i["assumption"] for i in document["inputs"])


def test_sleep_needs_idle_stretches_long_enough(history: Path) -> None:
    report = cost(history, Inputs())  # default: an hour or more of whole-server idle
    [sleep] = [s for s in report.savings if s.name.startswith("night sleep")]
    assert sleep.usd_per_year == 0


def test_a_month_without_samples_is_refused(history: Path) -> None:
    with pytest.raises(InputError, match="no samples in 2001-01"):
        read(history, "2001-01")
    with pytest.raises(InputError, match="not YYYY-MM"):
        read(history, "March")


@pytest.fixture(scope="module")
def bench_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real storage measurement on this machine."""
    out = tmp_path_factory.mktemp("bench")
    data = out / "data"
    data.mkdir()
    result = _dlrig(
        "bench",
        "storage",
        "--path",
        str(data),
        "--size",
        "64M",
        "--random-seconds",
        "0.3",
        "--no-fio",
        "--quick",
        "--device",
        "cpu",
        "--out",
        str(out / "b"),
        timeout=300,
    )
    assert result.returncode in (0, 1), result.stderr
    return out / "b"


def test_upgrade_reseats_a_degraded_link_first(tmp_path: Path, bench_dir: Path) -> None:
    machine = readers.load(T4)
    bench = load_bench(bench_dir)
    report = upgrade(machine, Inputs(), bench, None, None, name=str(T4))
    limits = {lim.area: lim for lim in report.limits}
    assert limits["interconnect"].limited is True
    assert "x8 of x16" in limits["interconnect"].evidence[0]
    first = report.steps[0]
    assert first.term == "short" and first.cost_usd == 0 and "x16" in first.change
    seq = next(r for r in bench if r.test == "seq_read")
    assert seq.value is not None
    assert limits["input pipeline"].limited is (seq.value < 1000 / 8)
    assert limits["compute"].limited is None  # no history: not measured
    # long-term steps are newer GPUs ordered by gain per dollar
    long_steps = [s for s in report.steps if s.term == "long"]
    assert long_steps and all(s.gain_factor and s.gain_factor > 1.2 for s in long_steps)
    ratios = [s.gain_factor / s.cost_usd for s in long_steps]  # type: ignore[operator]
    assert ratios == sorted(ratios, reverse=True)


def test_upgrade_with_the_server_s_history(tmp_path: Path, history: Path) -> None:
    snapshot = readers.load(H200)
    report = upgrade(snapshot, Inputs(), None, read(history), None)
    limits = {lim.area: lim for lim in report.limits}
    assert limits["compute"].limited is False  # busy about half the time
    assert limits["GPU memory"].limited is False  # peaks well below 141 GB
    with pytest.raises(InputError, match="not the same server"):
        upgrade(readers.load(T4), Inputs(), None, read(history), None)


def test_bench_folder_must_be_a_bench_document(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"no bench\.json"):
        load_bench(tmp_path)
    (tmp_path / "bench.json").write_text(json.dumps({"schema": "dlrig.fit"}))
    with pytest.raises(InputError, match="not a dlrig bench document"):
        load_bench(tmp_path)

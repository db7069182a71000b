"""The exporter keeps serving through a GPU that disappears, NVML calls that fail or hang, and
200 concurrent scrapes; the SQLite history survives `kill -9` in the middle of writes."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dlrig.machine.gpu_sources import ReplaySource
from dlrig.monitor import report
from dlrig.monitor.exporter import ExporterOptions, MetricsPage, MetricsServer
from dlrig.monitor.sampler import Sampler
from tests.conftest import NVSMI, ROOT
from tests.unit.test_monitor import _Faulty

H200 = NVSMI / "h200-capture-idle-load.txt"


def _scrape(url: str, timeout: float = 5.0) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        assert response.status == 200
        text = response.read().decode()
    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def _gpu_values(values: dict, name: str) -> dict[str, float]:
    return {dict(labels)["gpu"]: v for (n, labels), v in values.items() if n == name}


@pytest.fixture
def faulty_exporter():
    faulty = _Faulty(ReplaySource([H200], state="load", replicate=4))
    sampler = Sampler(faulty, interval_seconds=0.1, call_timeout_seconds=0.2, host=False)
    page = MetricsPage(faulty.info, ExporterOptions(), sampler)
    sampler.add_listener(page.update)
    server = MetricsServer(page, "127.0.0.1", 0).start()
    sampler.start()
    sampler.wait_for_sample()
    host, port = server.address
    try:
        yield faulty, sampler, f"http://{host}:{port}/metrics"
    finally:
        server.stop()
        sampler.stop()


def _wait_until(predicate, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError("condition not reached")


def test_gpu_that_disappears_is_reported_down_and_the_rest_keep_flowing(faulty_exporter) -> None:
    faulty, _, url = faulty_exporter
    # The page is updated by a listener of the first sample: wait for it, not for the sample.
    everyone = {"0": 1, "1": 1, "2": 1, "3": 1}
    _wait_until(lambda: _gpu_values(_scrape(url), "dlrig_gpu_up") == everyone)
    faulty.lost.add(2)
    values = _wait_until(
        lambda: (v := _scrape(url)) and _gpu_values(v, "dlrig_gpu_up").get("2") == 0 and v
    )
    assert _gpu_values(values, "dlrig_gpu_up") == {"0": 1, "1": 1, "2": 0, "3": 1}
    # No stale numbers for the lost GPU; the others still report theirs.
    power = _gpu_values(values, "dlrig_gpu_power_watts")
    assert set(power) == {"0", "1", "3"} and power["0"] == pytest.approx(627.40)
    before = values[("dlrig_exporter_samples_total", ())]
    after = _wait_until(lambda: _scrape(url)[("dlrig_exporter_samples_total", ())] > before + 3)
    assert after


def test_failing_nvml_call_marks_only_that_gpu(faulty_exporter) -> None:
    faulty, _, url = faulty_exporter
    faulty.failing.add(1)
    values = _wait_until(
        lambda: (v := _scrape(url)) and _gpu_values(v, "dlrig_gpu_up").get("1") == 0 and v
    )
    assert _gpu_values(values, "dlrig_gpu_up") == {"0": 1, "1": 0, "2": 1, "3": 1}
    faulty.failing.clear()
    _wait_until(lambda: _gpu_values(_scrape(url), "dlrig_gpu_up").get("1") == 1)


def test_hanging_nvml_call_does_not_stall_sampling_or_scrapes(faulty_exporter) -> None:
    faulty, sampler, url = faulty_exporter
    faulty.hang[0] = threading.Event()
    values = _wait_until(
        lambda: (v := _scrape(url)) and _gpu_values(v, "dlrig_gpu_up").get("0") == 0 and v
    )
    first_sample = values[("dlrig_exporter_samples_total", ())]
    time.sleep(1.0)  # five intervals with GPU 0 stuck in its call
    started = time.monotonic()
    values = _scrape(url, timeout=1.0)
    assert time.monotonic() - started < 0.5
    assert values[("dlrig_exporter_samples_total", ())] >= first_sample + 4
    assert _gpu_values(values, "dlrig_gpu_up") == {"0": 0, "1": 1, "2": 1, "3": 1}
    assert sampler.latest() is not None
    assert "has not returned" in (sampler.latest().gpus[0].error or "")  # type: ignore[union-attr]
    faulty.hang[0].set()  # the call comes back: the GPU is read again
    _wait_until(lambda: _gpu_values(_scrape(url), "dlrig_gpu_up").get("0") == 1)


def test_two_hundred_concurrent_scrapes_all_get_the_whole_page(faulty_exporter) -> None:
    _, _, url = faulty_exporter
    barrier = threading.Barrier(200)
    results: list[int] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def scrape() -> None:
        try:
            barrier.wait(timeout=30)
            values = _scrape(url, timeout=30)
            with lock:
                results.append(len(_gpu_values(values, "dlrig_gpu_up")))
        except BaseException as exc:  # noqa: BLE001 - collected and reported below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=scrape) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors[:3]
    assert results == [4] * 200


def _rows(db: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0])
    except sqlite3.OperationalError:  # the recorder has not created its tables yet
        return 0
    finally:
        conn.close()


def _grown(db: str, rows: int) -> bool:
    return os.path.exists(db) and _rows(db) > rows


def test_history_is_intact_after_kill_9_during_writes(tmp_path) -> None:
    db = str(tmp_path / "history.db")
    env = dict(os.environ)
    env.pop("DLRIG_DEBUG", None)
    rng = random.Random(7)
    seen = 0
    for _ in range(3):
        process = subprocess.Popen(
            [
                sys.executable, "-m", "dlrig", "monitor", "record", "--db", db,
                "--replay", str(H200), "--replicate", "8", "--frame-seconds", "0.2",
                "--interval", "0.05",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_until(lambda target=seen + 80: _grown(db, target), timeout=60)
            time.sleep(rng.uniform(0.0, 0.3))  # somewhere in the middle of a write
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
        conn = sqlite3.connect(db)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = int(conn.execute("SELECT COUNT(*) FROM gpu_samples").fetchone()[0])
        # Whole samples only: every timestamp has all 8 GPUs.
        partial = conn.execute(
            "SELECT COUNT(*) FROM (SELECT ts FROM gpu_samples GROUP BY ts HAVING COUNT(*) != 8)"
        ).fetchone()[0]
        conn.close()
        assert partial == 0
        assert rows > seen  # nothing committed before the kill was lost
        seen = rows
    result = report.build(db)
    assert len(result.gpus) == 8
    assert sum(g.samples for g in result.gpus) == seen

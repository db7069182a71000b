"""The monitor's sources, sampler, readings and history on recorded nvidia-smi outputs.

Expected values are read off the fixture files by eye (the line is quoted next to each), not
produced by dlrig's own parsers.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time

import pytest

from dlrig.errors import InputError
from dlrig.machine.gpu_sources import GpuLost, ReplaySource
from dlrig.machine.host_metrics import HostSample
from dlrig.machine.processes import container_of_cgroup
from dlrig.monitor import history, reading, report
from dlrig.monitor.sample import GpuReading, Sample
from dlrig.monitor.sampler import Sampler, bus_key
from tests.conftest import CORPUS, NVSMI

H200 = NVSMI / "h200-capture-idle-load.txt"
T4 = NVSMI / "tesla-t4-2procs-q-x.xml"
XID = NVSMI / "dmesg-xid119-gsp-rpc-timeout.log"
MIB = 2**20


def test_replay_reads_capture_states_as_frames() -> None:
    source = ReplaySource([H200])
    assert [f.state for f in source.frames] == ["idle", "load"]
    source.advance(0.0)
    idle = source.read_gpu(0)
    # idle query-gpu: "utilization.gpu [%] = 0 %", "power.draw [W] = 77.71 W"
    assert idle.utilization_gpu_percent == 0.0
    assert idle.power_draw_watts == pytest.approx(77.71)
    assert idle.clocks_event_reasons == ("gpu_idle",)
    source.advance(30.0)  # the default frame time moves to the next state
    load = source.read_gpu(0)
    # load: "memory.used [MiB] = 32362 MiB", "power.draw [W] = 627.40 W", "temperature.gpu = 52",
    # "temperature.memory = 40", "clocks.current.memory [MHz] = 3201 MHz", -q "Tx Throughput :
    # 4217 KB/s"
    assert load.utilization_gpu_percent == 100.0
    assert load.memory_used_bytes == 32362 * MIB
    assert load.power_draw_watts == pytest.approx(627.40)
    assert load.temperature_c == 52.0
    assert load.memory_temperature_c == 40.0
    assert load.memory_clock_mhz == 3201
    assert load.pcie_tx_bytes_per_second == 4217 * 1000
    assert {p.name for p in load.processes or ()} == {"/root/tools/memhog", "./gpu_burn"}
    source.advance(60.0)
    assert source.read_gpu(0).utilization_gpu_percent == 0.0  # cycles back to idle


def test_replay_state_pins_frames_and_rejects_unknown_state() -> None:
    source = ReplaySource([H200], state="load")
    source.advance(0.0)
    source.advance(1000.0)
    assert source.read_gpu(0).utilization_gpu_percent == 100.0
    with pytest.raises(InputError, match="'busy' is not in the recording"):
        ReplaySource([H200], state="busy")


def test_replay_replicates_and_loses_out_of_range_gpus() -> None:
    source = ReplaySource([T4], replicate=8)
    assert source.info.gpu_count == 8
    source.advance(0.0)
    uuids = {source.read_gpu(i).uuid for i in range(8)}
    assert len(uuids) == 8
    # The T4 record: <current_link_width>8x</current_link_width> of <max_link_width>16x
    assert source.read_gpu(7).pcie.width_current == 8
    with pytest.raises(GpuLost):
        source.read_gpu(8)


def test_replay_refuses_files_without_gpus(tmp_path) -> None:
    with pytest.raises(InputError, match="only kernel logs"):
        ReplaySource([XID])
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    with pytest.raises(InputError, match="not a format dlrig reads"):
        ReplaySource([junk])
    with pytest.raises(InputError, match="no such file"):
        ReplaySource([tmp_path / "missing.xml"])


def test_sampler_counts_xid_per_code_and_maps_bus_ids() -> None:
    source = ReplaySource([H200, XID], state="load")
    sampler = Sampler(source, interval_seconds=0.1, host=False)
    first = sampler.sample_once()
    second = sampler.sample_once()
    sampler.stop()
    # The kernel log holds five "NVRM: Xid (PCI:0000:9b:00): 119" lines; the H200 is at 83:00.0.
    [xid] = first.xids
    assert (xid.code, xid.count, xid.pci_bus_id, xid.gpu_index) == (119, 5, "0000:9b:00", None)
    assert xid.severity == "critical"
    assert second.xids == first.xids  # a counter: replayed events are not counted twice
    assert bus_key("00000000:9B:00.0") == bus_key("0000:9b:00") == (0, 0x9B, 0)


class _Faulty:
    """A real replay with one GPU made to fail the way NVML fails on a sick GPU."""

    def __init__(self, inner: ReplaySource) -> None:
        self.inner = inner
        self.info = inner.info
        self.lost: set[int] = set()
        self.failing: set[int] = set()
        self.hang: dict[int, threading.Event] = {}
        from dlrig.machine.nvml import _module

        # The real NVML binding's own error type; imported here, not inside a timed read.
        self.nvml = _module()

    def read_gpu(self, index: int):
        if index in self.lost:
            raise GpuLost(f"nvmlDeviceGetMemoryInfo: GPU {index} is lost")
        if index in self.failing:
            raise self.nvml.NVMLError(self.nvml.NVML_ERROR_UNKNOWN)
        if index in self.hang:
            self.hang[index].wait()
        return self.inner.read_gpu(index)

    def drain_xid(self):
        return self.inner.drain_xid()

    def advance(self, now: float) -> None:
        self.inner.advance(now)

    def close(self, calls_in_flight: bool = False) -> None:
        for event in self.hang.values():
            event.set()


def test_sampler_reports_lost_failing_and_hung_gpus_and_keeps_the_rest() -> None:
    faulty = _Faulty(ReplaySource([H200], state="load", replicate=4))
    sampler = Sampler(faulty, interval_seconds=0.2, call_timeout_seconds=0.1, host=False)
    assert all(r.up for r in sampler.sample_once().gpus)
    faulty.lost.add(1)
    faulty.failing.add(2)
    faulty.hang[3] = threading.Event()
    started = time.monotonic()
    sample = sampler.sample_once()
    assert time.monotonic() - started < 1.0  # the hung GPU did not stall the round
    status = {r.index: r.status for r in sample.gpus}
    assert status == {0: "ok", 1: "lost", 2: "error", 3: "hung"}
    assert "Unknown Error" in (sample.gpus[2].error or "")
    again = sampler.sample_once()  # the hung call is still out: no second call is queued
    assert again.gpus[3].status == "hung"
    assert "has not returned" in (again.gpus[3].error or "")
    faulty.hang[3].set()
    time.sleep(0.05)
    assert sampler.sample_once().gpus[3].status == "ok"
    sampler.stop()


def _host(cpu_percent: float, iowait: float = 0.0) -> HostSample:
    return HostSample(
        cpu_percent_per_core=(cpu_percent,) * 16,
        cpu_iowait_percent=iowait,
        load_average_1m=None,
        memory_total_bytes=64 * 2**30,
        memory_available_bytes=32 * 2**30,
        swap_used_bytes=0,
        shm_total_bytes=None,
        shm_used_bytes=None,
        disk_read_bytes_total=None,
        disk_write_bytes_total=None,
        network_receive_bytes_total=None,
        network_transmit_bytes_total=None,
    )


def _alternating(seconds: int, idle_every: int, host: HostSample | None) -> list[Sample]:
    """One sample per second from the real H200 capture: load, with an idle frame every N s."""
    source = ReplaySource([H200])
    idle_frame, load_frame = source.frames
    samples = []
    for second in range(seconds):
        frame = idle_frame if second % idle_every == 0 else load_frame
        gpu = frame.gpus[0]
        # Idle frames of a training job still hold the job's process and memory.
        if frame is idle_frame:
            gpu = load_frame.gpus[0].__class__(
                **{**gpu.__dict__, "processes": load_frame.gpus[0].processes}
            )
        samples.append(
            Sample(
                timestamp_unix=1000.0 + second,
                duration_seconds=0.0,
                gpus=(GpuReading(0, "ok", gpu),),
                host=host,
                xids=(),
                sequence=second + 1,
            )
        )
    return samples


def test_reading_names_a_data_loading_bound_job() -> None:
    samples = _alternating(60, idle_every=2, host=_host(97.0))
    [first, *_] = reading.read_situation(samples)
    assert first.cause == "input_pipeline_bound"
    assert first.text.startswith("GPU 0 idle 50% of the last minute while all CPU cores are busy")
    assert "raise DataLoader num_workers" in first.text


def test_reading_tells_io_bound_from_cpu_bound_and_quiet() -> None:
    io_bound = reading.read_situation(_alternating(60, 2, _host(30.0, iowait=45.0)))[0]
    assert "storage bound" in io_bound.text
    busy = reading.read_situation(_alternating(60, 1000, _host(30.0)))
    assert [r.severity for r in busy] == ["info"]
    assert busy[0].text.startswith("all 1 GPU(s) busy")


def test_reading_flags_the_t4_pcie_width_and_lost_gpus() -> None:
    faulty = _Faulty(ReplaySource([T4], replicate=2))
    sampler = Sampler(faulty, interval_seconds=0.2, host=False)
    sampler.sample_once()
    faulty.lost.add(1)
    found = reading.read_situation([sampler.sample_once()])
    sampler.stop()
    assert found[0].severity == "critical" and found[0].cause == "gpu_fell_off_bus"
    assert any("PCIe link x8 of x16" in r.text for r in found)


def test_container_of_cgroup_layouts() -> None:
    # /proc/<pid>/cgroup lines as printed on real hosts (published in neuvector/neuvector and
    # Qard/container-info test data): Debian docker, systemd docker, Kubernetes cgroupfs.
    debian = "4:memory:/4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970\n"
    assert container_of_cgroup(debian)[0] == (
        "4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970"
    )
    systemd = (
        "8:memory:/system.slice/docker-"
        "9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope\n"
    )
    assert container_of_cgroup(systemd)[0].startswith("9ec39b91f3d7")  # type: ignore[union-attr]
    kube = (
        "11:devices:/kubepods/besteffort/pod74c13223-5a00-11e9-b385-42010a80018d/"
        "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376\n"
    )
    assert container_of_cgroup(kube) == (
        "34dc0b5e626f2c5c4c5170e34b10e7654ce36f0fcd532739f4445baabea03376",
        "74c13223-5a00-11e9-b385-42010a80018d",
    )
    host = "0::/user.slice/user-1000.slice/session-2.scope\n"
    assert container_of_cgroup(host) == (None, None)


def _record(tmp_path, seconds: int, frame_seconds: float, retention=None) -> str:
    """A history of the real H200 capture: one sample a second, states switching every
    `frame_seconds` (idle first), written as the sampler's listener would write it."""
    tmp_path.mkdir(exist_ok=True)
    db = str(tmp_path / "history.db")
    idle, load = ReplaySource([H200]).frames
    writer = history.HistoryWriter(db, retention or history.Retention())
    t0 = 1_700_000_000.0
    for i in range(seconds):
        frame = (idle, load)[int(i // frame_seconds) % 2]
        gpus = (GpuReading(0, "ok", frame.gpus[0]),)
        writer.write(Sample(t0 + i, 0.0, gpus, None, (), i + 1))
    writer.close()
    return db


def test_history_report_distribution_idle_energy_and_cost(tmp_path) -> None:
    db = _record(tmp_path, seconds=240, frame_seconds=60.0)  # idle, load, idle, load minutes
    result = report.build(db, idle_min_seconds=30.0, price_per_kwh=0.30)
    [gpu] = result.gpus
    assert gpu.name == "NVIDIA H200" and gpu.samples == 240
    assert gpu.utilization_distribution["0-10%"] == pytest.approx(0.5, abs=0.01)
    assert gpu.utilization_distribution["90-100%"] == pytest.approx(0.5, abs=0.01)
    assert [round(p.seconds) for p in gpu.idle_periods] == [60, 60]
    # No energy counter in a recording: power is integrated, 60 s at 77.71 W (idle) and 60 s at
    # 627.40 W (load), twice.
    expected_kwh = 2 * 60 * (77.71 + 627.40) / 3.6e6
    assert gpu.energy_method == "integrated power"
    assert gpu.energy_kwh == pytest.approx(expected_kwh, rel=0.01)
    assert result.cost == pytest.approx(expected_kwh * 0.30, rel=0.01)
    assert gpu.throttled_seconds == 0.0  # the H200 capture shows no slowdown reason
    document = result.to_dict()
    assert document["schema"] == "dlrig.monitor.report" and document["schema_version"] == 1


def test_history_report_plots_are_png(tmp_path) -> None:
    db = _record(tmp_path, seconds=30, frame_seconds=10.0)
    written = report.write_plots(db, tmp_path / "plots")
    assert len(written) == 4
    for path in written:
        with open(path, "rb") as stream:
            assert stream.read(8) == b"\x89PNG\r\n\x1a\n"


def test_history_is_bounded_by_age_and_size(tmp_path) -> None:
    db = _record(
        tmp_path,
        seconds=600,
        frame_seconds=60.0,
        retention=history.Retention(max_age_seconds=120.0, max_bytes=None, check_every_samples=50),
    )
    conn = sqlite3.connect(db)
    oldest, newest = conn.execute("SELECT MIN(ts), MAX(ts) FROM gpu_samples").fetchone()
    conn.close()
    assert newest - oldest <= 120 + 50  # trimmed every 50 samples to the last 120 s
    big = _record(tmp_path / "big", seconds=3000, frame_seconds=60.0)
    writer = history.HistoryWriter(
        big, history.Retention(max_age_seconds=None, max_bytes=96 * 1024)
    )
    before = writer.size_bytes()
    writer.trim()
    assert before > 96 * 1024 >= writer.size_bytes()
    writer.close()
    conn = sqlite3.connect(big)
    newest = conn.execute("SELECT MAX(ts) FROM gpu_samples").fetchone()[0]
    conn.close()
    assert newest == 1_700_000_000.0 + 2999  # the newest samples are the ones kept


def test_history_rejects_files_that_are_not_histories(tmp_path) -> None:
    text = tmp_path / "notes.db"
    text.write_text("not sqlite at all, just text that is long enough to have a header" * 20)
    with pytest.raises(InputError, match="not a"):
        report.build(text)
    with pytest.raises(InputError, match="no such history"):
        report.build(tmp_path / "absent.db")
    with pytest.raises(InputError, match="negative"):
        report.build(_record(tmp_path, 5, 10.0), price_per_kwh=-1)


def test_replay_reads_a_query_gpu_csv(tmp_path) -> None:
    # The capture's load-state `--query-gpu=... --format=csv` output, as a file of its own.
    from dlrig.machine.readers import nvsmi_capture

    _, sections = nvsmi_capture.split_sections(H200.read_text())
    csv = next(s for s in sections if s.state == "load" and s.what.startswith("query-gpu ("))
    path = tmp_path / "query.csv"
    path.write_text(csv.body + "\n")
    source = ReplaySource([path])
    source.advance(0.0)
    gpu = source.read_gpu(0)
    assert gpu.power_draw_watts == pytest.approx(627.40)
    assert gpu.memory_used_bytes == 32362 * MIB
    assert source.info.driver_version == "590.48.01"


def test_report_does_not_count_gaps_in_the_recording(tmp_path) -> None:
    # Two minutes of the idle H200, a week with the recorder stopped, two more minutes.
    idle, _ = ReplaySource([H200]).frames
    db = str(tmp_path / "gap.db")
    writer = history.HistoryWriter(db)
    t0 = 1_700_000_000.0
    times = [t0 + i for i in range(120)] + [t0 + 7 * 86400 + i for i in range(120)]
    for n, ts in enumerate(times):
        writer.write(Sample(ts, 0.0, (GpuReading(0, "ok", idle.gpus[0]),), None, (), n + 1))
    writer.close()
    [gpu] = report.build(db, idle_min_seconds=30).gpus
    assert gpu.seconds == pytest.approx(240, abs=3)
    assert [round(p.seconds) for p in gpu.idle_periods] == [120, 120]
    # "power.draw [W] = 77.71 W" for 240 s, not for a week
    assert gpu.energy_kwh == pytest.approx(77.71 * 240 / 3.6e6, rel=0.02)


def test_replay_refuses_files_that_name_gpus_without_readings() -> None:
    # A collect_env paste lists "GPU 0: NVIDIA H100 80GB HBM3" but measures nothing: replaying
    # it would show a healthy idle GPU that nobody saw.
    paste = CORPUS / "collect_env" / "sm90-h100-torch201-cu117-warning.txt"
    assert "H100" in paste.read_text()
    with pytest.raises(InputError, match="holds no GPU readings"):
        ReplaySource([paste])


def test_replayed_xid_events_keep_the_time_their_log_line_gives() -> None:
    import datetime as dt

    from dlrig import monitor
    from dlrig.machine.readers.kernel_log import event_unix
    from tests.conftest import NVSMI

    source = monitor.open_source(
        [str(NVSMI / "tesla-t4-2procs-q-x.xml"), str(NVSMI / "dmesg-xid119-gsp-rpc-timeout.log")]
    )
    _, second = monitor.once(source, host=False, settle_seconds=0.05)
    [xid] = [x for x in second.xids if x.code == 119]  # counts are cumulative
    # The log's last Xid 119 line: [Sun Feb 23 16:30:13 2025]; read as UTC.
    assert xid.last_seen_unix == dt.datetime(2025, 2, 23, 16, 30, 13, tzinfo=dt.UTC).timestamp()
    assert event_unix("1843.308145") is None  # seconds since boot: no wall clock
    now = dt.datetime(2026, 1, 5, tzinfo=dt.UTC).timestamp()
    # A syslog stamp has no year: the latest such moment that is not in the future.
    assert (
        event_unix("Dec 30 10:00:00", now)
        == dt.datetime(2025, 12, 30, 10, tzinfo=dt.UTC).timestamp()
    )


def test_report_and_plan_count_the_same_energy_from_the_counter(tmp_path) -> None:
    # The idle H200 at 77.71 W, with an energy counter that rises 100 J a second and restarts
    # once (a driver reload); one sample in the middle has no counter reading.
    import dataclasses

    from dlrig.plan.usage import read

    idle, _ = ReplaySource([H200]).frames
    db = str(tmp_path / "counter.db")
    writer = history.HistoryWriter(db)
    t0 = 1_700_000_000.0
    counter = [100.0 * i for i in range(60)] + [100.0 * i for i in range(60)]
    counter[90] = None  # type: ignore[call-overload]
    for n, joules in enumerate(counter):
        gpu = dataclasses.replace(idle.gpus[0], energy_consumed_joules=joules)
        writer.write(Sample(t0 + n, 0.0, (GpuReading(0, "ok", gpu),), None, (), n + 1))
    writer.close()
    [gpu] = report.build(db).gpus
    # 117 one-second steps of 100 J, the restart counting nothing, the two steps beside the
    # missing reading and the last sample's second at 77.71 W.
    expected_kwh = (100.0 * 116 + 77.71 * 3) / 3.6e6
    assert gpu.energy_method == "counter and integrated power"
    assert gpu.energy_kwh == pytest.approx(expected_kwh, rel=1e-6)
    [usage] = read(db).gpus
    assert usage.energy_kwh == pytest.approx(gpu.energy_kwh, rel=1e-9)


def test_a_counter_on_every_sample_is_the_counter_method() -> None:
    # 10 samples a second apart, 50 J each step; the last sample's second counts its power.
    samples = [(float(t), 200.0, 50.0 * t) for t in range(10)]
    kwh, method = report.energy(samples, report.sample_weights([s[0] for s in samples], 3.0), 3.0)
    assert method == "counter"
    assert kwh == pytest.approx((50.0 * 9 + 200.0 * 1.0) / 3.6e6)


def _frames(*parts: tuple[int, str, bool]) -> list[Sample]:
    """Samples from the real H200 capture: (seconds, "idle"|"load", a process holds it)."""
    idle_frame, load_frame = ReplaySource([H200]).frames
    samples, second = [], 0
    for seconds, state, held in parts:
        gpu = (idle_frame if state == "idle" else load_frame).gpus[0]
        gpu = gpu.__class__(
            **{**gpu.__dict__, "processes": load_frame.gpus[0].processes if held else ()}
        )
        if not held:
            gpu = gpu.__class__(**{**gpu.__dict__, "memory_used_bytes": 0})
        for _ in range(seconds):
            samples.append(Sample(1000.0 + second, 0.0, (GpuReading(0, "ok", gpu),), None, (), 1))
            second += 1
    return samples


def test_idle_time_before_a_job_starts_is_not_the_job_waiting():
    # issue 23: 20 s of an empty GPU, then a job that keeps it busy: no "idle 33%" reading
    found = reading.read_situation(_frames((20, "idle", False), (40, "load", True)))
    assert not any(r.cause == "input_pipeline_bound" for r in found), found
    # the same idle seconds while the job holds the GPU are the job waiting
    waiting = reading.read_situation(_frames((20, "idle", True), (40, "load", True)))
    assert any(r.cause == "input_pipeline_bound" for r in waiting)


def test_full_memory_on_an_idle_gpu_is_held_not_an_imminent_oom():
    idle_frame, _ = ReplaySource([H200]).frames
    gpu = idle_frame.gpus[0]
    full = gpu.__class__(
        **{**gpu.__dict__, "memory_used_bytes": int(0.99 * (gpu.memory_total_bytes or 0))}
    )
    samples = [
        Sample(1000.0 + s, 0.0, (GpuReading(0, "ok", full),), None, (), 1) for s in range(30)
    ]
    found = reading.read_situation(samples)
    assert not any(r.cause == "cuda_oom" for r in found)
    assert any("held while the GPU is idle" in r.text for r in found)


def test_a_lowered_power_limit_is_a_finding_not_healthy():
    # the recorded RTX 3090 (telegraf's rtx-3090-v12.xml) runs with a 200 W limit of 350 W
    sampler = Sampler(ReplaySource([NVSMI / "rtx3090-q-x.xml"]), interval_seconds=0.2, host=False)
    found = reading.read_situation([sampler.sample_once()])
    sampler.stop()
    assert any("power limit 200 W, below its 350 W default" in r.text for r in found)
    assert not any("healthy" in r.text for r in found)


def test_recordings_of_two_machines_are_not_replayed_as_one():
    # issue 23: two machines' files were served together with gpu="" labels
    with pytest.raises(InputError, match="not the same machine"):
        ReplaySource([H200, NVSMI / "rtx3090-q-x.xml"])


def test_a_saved_history_report_reads_back_as_the_report_it_was(tmp_path) -> None:
    # what `dlrig report` does with a `monitor report --json` file
    result = report.build(_record(tmp_path, seconds=240, frame_seconds=60.0), idle_min_seconds=30)
    saved = json.loads(json.dumps(result.to_dict()))
    assert report.HistoryReport.from_dict(saved) == result
    saved["gpus"][0]["seconds"] = "long"
    with pytest.raises(ValueError, match=r"gpus\[0\]\.seconds"):
        report.HistoryReport.from_dict(saved)

"""Columns laid out numbers first: bars and sparklines give way, names are cut, numbers never."""

from __future__ import annotations

from dlrig.machine.model import Gpu
from dlrig.monitor.columns import Column, lay_out, lines
from dlrig.monitor.live import render
from dlrig.monitor.sample import GpuReading, Sample


def _columns() -> list[Column]:
    return [
        Column("name", ["a-very-long-process-name", "x"], cut=True, least=6, rank=1),
        Column("pid", ["123456", "7"], right=True),
        Column("bar", lambda w: ["#" * w, "#" * w], rank=2, least=4, most=20),
        Column("GiB", ["31.6/140.4", "0.0/9.8"], right=True),
    ]


def test_numbers_stay_whole_and_decoration_gives_way_first():
    wide = lines(lay_out(_columns(), 200) or [])
    assert wide[1] == "a-very-long-process-name  123456  ####################  31.6/140.4"
    narrow = lines(lay_out(_columns(), 30) or [])
    # The bar is gone, the name is cut, the numbers are whole.
    assert narrow[1] == "a-very-lo…  123456  31.6/140.4"
    assert all(len(line) <= 30 for line in narrow)


def test_none_when_the_numbers_alone_do_not_fit():
    assert lay_out(_columns(), 17) is None
    assert lay_out(_columns(), 18) is not None  # "pid" + gap + "GiB" at their widest


def test_an_idle_sm_clock_of_0_mhz_is_a_reading_not_a_question_mark():
    from rich.console import Console

    gpu = Gpu(index=0, name="NVIDIA H200", sm_clock_mhz=0, sm_clock_max_mhz=1980)
    sample = Sample(1.0, 0.0, (GpuReading(0, "ok", gpu),), None, (), 1)
    console = Console(width=100, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render([sample]))
    assert "0/1980" in console.export_text()


def test_a_lost_gpu_keeps_the_table_and_says_why_below_it():
    from rich.console import Console

    from dlrig.machine.gpu_sources import ReplaySource
    from tests.conftest import NVSMI

    source = ReplaySource([NVSMI / "tesla-t4-2procs-q-x.xml"])
    source.advance(0.0)
    good = source.read_gpu(0)
    why = "NVML: GPU is lost (nvmlDeviceGetUtilizationRates) after 3 retries over 2 s"
    readings = (GpuReading(0, "ok", good), GpuReading(1, "lost", good, why))
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render([Sample(1.0, 0.0, readings, None, (), 1)]))
    text = console.export_text()
    lines = text.splitlines()
    assert lines[1].startswith("GPU ") and "PCIe" in lines[1]  # still a table at 80 columns
    assert any(line.startswith("1 T4") and "LOST" in line for line in lines), text
    assert f"GPU 1 T4: LOST — {why}" in " ".join(text.split())  # wrapped at 80, whole
    assert max(len(line) for line in lines) <= 80


def test_a_logfmt_line_stays_one_line_whatever_the_error_says():
    import json as _json

    from dlrig.monitor.stream import sample_lines

    why = 'NVML: "GPU is lost"\nsecond line'
    readings = (GpuReading(0, "lost", None, why),)
    [line] = sample_lines(Sample(1.0, 0.0, readings, None, (), 1))
    assert "\n" not in line
    quoted = line.split("error=", 1)[1]
    assert _json.loads(quoted) == why

"""NVML on a real driver: doctor's probe and the monitor's sampler against what CUDA says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.gpu


def _cuda_view(torch) -> list[dict]:
    return [
        {
            "name": torch.cuda.get_device_name(i),
            "memory_total_bytes": torch.cuda.get_device_properties(i).total_memory,
            "capability": "{}.{}".format(*torch.cuda.get_device_capability(i)),
        }
        for i in range(torch.cuda.device_count())
    ]


def test_doctor_probe_sees_every_gpu_cuda_sees(cuda, figures):
    from dlrig.machine import probe

    machine = probe.collect()
    figures("doctor_machine", json.loads(machine.to_json()))
    assert machine.driver is not None and machine.driver.version
    visible = _cuda_view(cuda)
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        assert len(machine.gpus) == len(visible)
    by_name = {gpu.name for gpu in machine.gpus}
    for gpu in visible:
        assert gpu["name"] in by_name, (gpu, by_name)
    for gpu in machine.gpus:
        assert gpu.memory_total_bytes and gpu.memory_total_bytes > 0
        assert gpu.compute_capability in {v["capability"] for v in visible}
        assert gpu.catalogue_id, f"{gpu.name} is not in the GPU catalogue"


def test_a_real_sampler_round_reads_every_gpu(cuda, figures):
    from dlrig import monitor

    source = monitor.open_source()
    sampler = monitor.Sampler(source, interval_seconds=0.2)
    try:
        costs = []
        for _ in range(20):
            started = time.perf_counter()
            sample = sampler.sample_once()
            costs.append(time.perf_counter() - started)
    finally:
        sampler.stop()
    costs.sort()
    figures(
        "sampler_cost",
        {
            "gpus": len(sample.gpus),
            "p50_ms": costs[len(costs) // 2] * 1e3,
            "p99_ms": costs[-1] * 1e3,
            "sample": sample.to_dict(),
        },
    )
    assert all(reading.up for reading in sample.gpus), sample.gpus
    for gpu in sample.readable():
        assert gpu.memory_total_bytes and gpu.power_draw_watts is not None
        assert gpu.temperature_c is not None and gpu.sm_clock_mhz is not None


def test_doctor_and_monitor_commands_on_the_real_driver(cuda, figures):
    env = {k: v for k, v in os.environ.items() if k != "DLRIG_DEBUG"}
    doctor = subprocess.run(
        [sys.executable, "-m", "dlrig.cli.main", "doctor", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert doctor.returncode in (0, 1), doctor.stderr
    figures("doctor", json.loads(doctor.stdout))
    once = subprocess.run(
        [sys.executable, "-m", "dlrig.cli.main", "monitor", "--once", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert once.returncode == 0, once.stderr
    document = json.loads(once.stdout)
    figures("monitor_once", document)
    assert document["schema"] == "dlrig.monitor.sample"
    assert [g["status"] for g in document["sample"]["gpus"]] == ["ok"] * cuda.cuda.device_count()

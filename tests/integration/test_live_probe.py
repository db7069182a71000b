"""Probing this (GPU-less) machine: every source answers or says why it cannot."""

from __future__ import annotations

import os

from dlrig import doctor
from dlrig.machine.probe import collect
from dlrig.report import Status


def test_live_probe_describes_this_machine():
    machine = collect()
    assert machine.origin.kind == "live"
    assert machine.os and machine.os.kernel_release == os.uname().release
    assert machine.cpu and machine.cpu.threads == os.cpu_count()
    assert machine.memory and machine.memory.total_bytes > 0
    assert machine.shm and machine.shm.total_bytes
    assert machine.mounts and any(m.mountpoint == "/" for m in machine.mounts)
    assert machine.network and any(i.kind == "loopback" for i in machine.network)
    assert machine.frameworks and machine.frameworks.python_executable
    # no NVIDIA hardware here: that is data, not a failure
    assert machine.driver is not None and machine.driver.nvidia_pci_devices == 0
    assert machine.gpus == ()


def test_cpu_only_machine_is_not_a_failure():
    report = doctor.run(machine=collect())
    loaded = next(r for r in report.checks if r.id == "driver.loaded")
    assert loaded.status is Status.INFO
    assert "CPU-only" in loaded.title
    assert not [r for r in report.checks if r.area == "gpu" and r.status is Status.FAIL]


def test_env_snapshot_filters_secrets(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "eth0")
    from dlrig.machine.runner import ProbeContext

    machine = collect(ProbeContext(env=dict(os.environ)))
    names = dict(machine.env or ())
    assert "HF_TOKEN" not in names
    assert names["NCCL_SOCKET_IFNAME"] == "eth0"

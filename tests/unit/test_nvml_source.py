"""NvmlSource against NVML's Python API shape, answering with the H200 capture's recorded values.

No GPU here, so the binding's functions are answered from the recording ("load" state of
h200-capture-idle-load.txt, values restated below in NVML's own units: mW, MiB, KB/s). The real
`nvidia-ml-py` module still supplies the constants, error classes and ctypes structures, so the
unit conversions, the error mapping and the structure handling are the code under test.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from dlrig.machine import nvml as nvml_gate
from dlrig.machine.gpu_sources import GpuLost, NvmlSource

MIB = 2**20
REAL = nvml_gate._module()


class RecordedNvml:
    """Functions answer like NVML did on the recorded H200; the rest is the real binding."""

    def __init__(self, lost: bool = False) -> None:
        self.lost = lost
        self.xid_delivered = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(REAL, name)

    def _unsupported(self, *args: Any) -> Any:
        raise REAL.NVMLError(REAL.NVML_ERROR_NOT_SUPPORTED)

    nvmlDeviceGetTotalEnergyConsumption = _unsupported  # not in the recording
    nvmlDeviceGetTemperatureThreshold = _unsupported
    nvmlDeviceGetRetiredPages = _unsupported  # "retired_pages.*: [N/A]" on this GPU
    nvmlDeviceGetRetiredPagesPendingStatus = _unsupported
    nvmlDeviceGetFanSpeed = _unsupported  # "fan.speed [%] = [N/A]"
    nvmlDeviceGetFieldValues = _unsupported
    nvmlDeviceGetGraphicsRunningProcesses_v3 = staticmethod(lambda handle: [])

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return "gpu0"

    def nvmlSystemGetDriverVersion(self) -> str:
        return "590.48.01"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 13010  # "CUDA Version : 13.1"

    def nvmlDeviceGetName(self, handle: str) -> str:
        return "NVIDIA H200"

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return "GPU-00000000-0000-0000-0000-000000000000"

    def nvmlDeviceGetPciInfo(self, handle: str) -> Any:
        return SimpleNamespace(busId=b"00000000:83:00.0")

    def nvmlDeviceGetCudaComputeCapability(self, handle: str) -> tuple[int, int]:
        return (9, 0)

    def nvmlDeviceGetMemoryInfo(self, handle: str, version: int | None = None) -> Any:
        if self.lost:
            raise REAL.NVMLError(REAL.NVML_ERROR_GPU_IS_LOST)
        return SimpleNamespace(total=143771 * MIB, used=32362 * MIB, free=110796 * MIB)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: str) -> int:
        return 5

    nvmlDeviceGetGpuMaxPcieLinkGeneration = nvmlDeviceGetMaxPcieLinkGeneration
    nvmlDeviceGetCurrPcieLinkGeneration = nvmlDeviceGetMaxPcieLinkGeneration

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: str) -> int:
        return 16

    nvmlDeviceGetCurrPcieLinkWidth = nvmlDeviceGetMaxPcieLinkWidth

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: str) -> int:
        return 700_000  # mW

    nvmlDeviceGetEnforcedPowerLimit = nvmlDeviceGetPowerManagementDefaultLimit

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 627_400  # "power.draw [W] = 627.40 W"

    def nvmlDeviceGetEccMode(self, handle: str) -> tuple[int, int]:
        return (1, 1)

    def nvmlDeviceGetMaxClockInfo(self, handle: str, clock: int) -> int:
        return {REAL.NVML_CLOCK_SM: 1980, REAL.NVML_CLOCK_MEM: 3201}[clock]

    nvmlDeviceGetClockInfo = nvmlDeviceGetMaxClockInfo

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:
        return SimpleNamespace(gpu=100, memory=7)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        return 0  # "clocks_event_reasons.active = 0x0000000000000000"

    def nvmlDeviceGetPerformanceState(self, handle: str) -> int:
        return 0

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        return 52

    def nvmlDeviceGetTotalEccErrors(self, handle: str, kind: int, counter: int) -> int:
        return 0

    def nvmlDeviceGetRemappedRows(self, handle: str) -> tuple[int, int, int, int]:
        return (0, 0, 0, 0)

    def nvmlDeviceGetMigMode(self, handle: str) -> tuple[int, int]:
        return (0, 0)

    def nvmlDeviceGetPcieThroughput(self, handle: str, counter: int) -> int:
        return {REAL.NVML_PCIE_UTIL_TX_BYTES: 4217, REAL.NVML_PCIE_UTIL_RX_BYTES: 8691}[counter]

    def nvmlDeviceGetPcieReplayCounter(self, handle: str) -> int:
        return 0

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: str) -> list[Any]:
        return [
            SimpleNamespace(pid=10291, usedGpuMemory=2566 * MIB),
            SimpleNamespace(pid=10293, usedGpuMemory=1542 * MIB),
            SimpleNamespace(pid=10309, usedGpuMemory=28234 * MIB),
        ]

    # GPM: the recording has none, so each metric answers with its own id, which shows that
    # every field is filled from the metric it names.
    def nvmlGpmQueryDeviceSupport(self, handle: str) -> Any:
        return SimpleNamespace(isSupportedDevice=1)

    def nvmlGpmSampleAlloc(self) -> Any:
        return REAL.c_nvmlGpmSample_t()

    def nvmlGpmSampleGet(self, handle: str, sample: object) -> object:
        return sample

    def nvmlGpmSampleFree(self, sample: object) -> None: ...

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        for i in range(request.numMetrics):
            request.metrics[i].value = float(request.metrics[i].metricId)
            request.metrics[i].nvmlReturn = 0
        return request

    # Xid: the kernel log's "NVRM: Xid (PCI:0000:9b:00): 119" arrives once through the event set.
    def nvmlEventSetCreate(self) -> object:
        return object()

    def nvmlDeviceRegisterEvents(self, handle: str, kinds: int, events: object) -> None: ...

    def nvmlEventSetWait_v2(self, events: object, timeout_ms: int) -> Any:
        if not self.xid_delivered.is_set():
            self.xid_delivered.set()
            return SimpleNamespace(
                device="gpu0", eventType=REAL.nvmlEventTypeXidCriticalError, eventData=119
            )
        threading.Event().wait(timeout_ms / 1000)
        raise REAL.NVMLError(REAL.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, events: object) -> None: ...


@pytest.fixture
def recorded(monkeypatch):
    fake = RecordedNvml()
    monkeypatch.setattr(nvml_gate, "_module", lambda: fake)
    return fake


def test_nvml_readings_convert_to_base_units(recorded) -> None:
    source = NvmlSource()
    try:
        assert source.info.driver_version == "590.48.01"
        assert source.info.cuda_version == "13.1"
        first = source.read_gpu(0)
        gpu = source.read_gpu(0)
    finally:
        source.close()
    assert gpu.name == "NVIDIA H200" and gpu.catalogue_id == "h200-sxm-141gb"
    assert gpu.pci_bus_id == "00000000:83:00.0"
    assert gpu.memory_used_bytes == 32362 * MIB and gpu.memory_total_bytes == 143771 * MIB
    assert gpu.power_draw_watts == pytest.approx(627.40)
    assert gpu.power_limit_watts == gpu.power_default_limit_watts == 700.0
    assert gpu.utilization_gpu_percent == 100.0 and gpu.utilization_memory_percent == 7.0
    assert (gpu.sm_clock_mhz, gpu.memory_clock_mhz) == (1980, 3201)
    assert gpu.clocks_event_reasons == ()
    assert gpu.performance_state == "P0"
    assert gpu.pcie_tx_bytes_per_second == 4217 * 1000  # NVML's KB/s are 1000 bytes
    assert gpu.pcie_rx_bytes_per_second == 8691 * 1000
    assert gpu.pcie.gen_current == 5 and gpu.pcie.width_current == 16
    assert gpu.energy_consumed_joules is None and gpu.fan_speed_percent is None
    assert gpu.retired_pages.single_bit is None
    assert sorted(p.pid for p in gpu.processes or ()) == [10291, 10293, 10309]
    assert {p.used_memory_bytes for p in gpu.processes or ()} >= {28234 * MIB}
    # GPM needs two samples: none on the first reading, every metric on the second.
    assert first.sm_activity_percent is None
    assert gpu.graphics_activity_percent == REAL.NVML_GPM_METRIC_GRAPHICS_UTIL
    assert gpu.sm_activity_percent == REAL.NVML_GPM_METRIC_SM_UTIL
    assert gpu.sm_occupancy_percent == REAL.NVML_GPM_METRIC_SM_OCCUPANCY
    assert gpu.tensor_activity_percent == REAL.NVML_GPM_METRIC_ANY_TENSOR_UTIL
    assert gpu.dram_activity_percent == REAL.NVML_GPM_METRIC_DRAM_BW_UTIL


def _drain(source: NvmlSource) -> list[Any]:
    """The Xid events the watcher thread queued, waiting up to 2 s for the first."""
    events: list[Any] = []
    for _ in range(100):
        events += source.drain_xid()
        if events:
            break
        threading.Event().wait(0.02)
    return events


def test_nvml_xid_events_arrive_through_the_event_set(recorded) -> None:
    source = NvmlSource()
    try:
        assert recorded.xid_delivered.wait(5)
        events = _drain(source)
    finally:
        source.close()
    [event] = events
    assert (event.code, event.pci_bus_id) == (119, "00000000:83:00.0")


def test_nvml_gpu_is_lost_raises_gpu_lost(monkeypatch) -> None:
    fake = RecordedNvml(lost=True)
    monkeypatch.setattr(nvml_gate, "_module", lambda: fake)
    source = NvmlSource(xid_events=False)
    try:
        with pytest.raises(GpuLost, match="GPU is lost"):
            source.read_gpu(0)
    finally:
        source.close()


def test_xid_watcher_survives_a_gpu_that_is_lost(monkeypatch) -> None:
    # Xid 79: by the time the event is read the GPU no longer answers NVML at all.
    fake = RecordedNvml()
    monkeypatch.setattr(nvml_gate, "_module", lambda: fake)
    source = NvmlSource()
    try:
        fake.lost = True
        fake.nvmlDeviceGetPciInfo = fake._unsupported  # type: ignore[method-assign]
        assert fake.xid_delivered.wait(5)
        events = _drain(source)
        assert source._xid_thread is not None and source._xid_thread.is_alive()
    finally:
        source.close()
    assert [e.code for e in events] == [119]

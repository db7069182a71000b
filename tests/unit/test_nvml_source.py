"""NvmlSource against NVML's Python API shape, answering with the H200 capture's recorded values.

No GPU here, so the binding's functions are answered from the recording ("load" state of
h200-capture-idle-load.txt, values restated below in NVML's own units: mW, MiB, KB/s; its
`nvidia-smi nvlink -s` section lists links 0-17). The MIG variant answers from the H100 MIG
capture. The real `nvidia-ml-py` module still supplies the constants, error classes, ctypes
structures (field values are real `c_nvmlFieldValue_t`) and the NVMLError subclass NVML's return
code maps to, so the unit conversions, the error mapping and the structure handling are the
code under test.
"""

from __future__ import annotations

import dataclasses
import re
import threading
from types import SimpleNamespace
from typing import Any

import pytest

from dlrig.machine import nvidia, nvml_gpu
from dlrig.machine import nvml as nvml_gate
from dlrig.machine.gpu_sources import GpuLost, NvmlSource
from tests.conftest import ROOT

MIB = 2**20
REAL = nvml_gate._module()
H200_LINKS = 18  # "nvidia-smi nvlink -s": Link 0 ... Link 17, 26.562 GB/s each


def _error(code: int) -> Exception:
    return REAL.NVMLError(code)  # the binding maps the code to its NVMLError_* subclass


def _field(request: Any, answer: float | None, value_type: int = 1) -> Any:
    """One real c_nvmlFieldValue_t as NVML fills it."""
    value = REAL.c_nvmlFieldValue_t()
    value.fieldId, value.scopeId = request if isinstance(request, tuple) else (request, 0)
    value.valueType = value_type
    if answer is None:
        value.nvmlReturn = REAL.NVML_ERROR_NOT_SUPPORTED
    else:
        value.nvmlReturn = REAL.NVML_SUCCESS
        setattr(value.value, {1: "uiVal", 3: "ullVal"}[value_type], int(answer))
    return value


class RecordedNvml:
    """Functions answer like NVML did on the recorded H200; the rest is the real binding."""

    links = H200_LINKS
    link_count_field = True  # drivers before R450 do not answer NVML_FI_DEV_NVLINK_LINK_COUNT

    def __init__(self, lost: bool = False) -> None:
        self.lost = lost
        self.xid_delivered = threading.Event()
        self.links_asked: list[int] = []
        self.field_requests: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(REAL, name)

    def _unsupported(self, *args: Any) -> Any:
        raise REAL.NVMLError(REAL.NVML_ERROR_NOT_SUPPORTED)

    nvmlDeviceGetTotalEnergyConsumption = _unsupported  # not in the recording
    nvmlDeviceGetTemperatureThreshold = _unsupported
    nvmlDeviceGetRetiredPages = _unsupported  # "retired_pages.*: [N/A]" on this GPU
    nvmlDeviceGetRetiredPagesPendingStatus = _unsupported
    nvmlDeviceGetFanSpeed = _unsupported  # "fan.speed [%] = [N/A]"
    nvmlDeviceGetPersistenceMode = staticmethod(lambda handle: 1)  # "persistence_mode = Enabled"

    def nvmlDeviceGetFieldValues(self, handle: str, requests: list[Any]) -> list[Any]:
        self.field_requests += list(requests)
        answers = []
        for request in requests:
            field_id, link = request if isinstance(request, tuple) else (request, 0)
            if field_id == REAL.NVML_FI_DEV_MEMORY_TEMP:
                answers.append(_field(request, 40))  # "temperature.memory = 40"
            elif field_id == REAL.NVML_FI_DEV_NVLINK_LINK_COUNT:
                answers.append(_field(request, self.links if self.link_count_field else None))
            elif field_id in (
                REAL.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                REAL.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
            ):
                # Not in the recording: each link answers 1000 + its number KiB (TX) and
                # 2000 + its number (RX), so the sum shows every link was counted once.
                base = 1000 if field_id == REAL.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX else 2000
                answers.append(_field(request, base + link if link < self.links else None, 3))
            else:
                answers.append(_field(request, None))
        return answers

    def nvmlDeviceGetNvLinkState(self, handle: str, link: int) -> int:
        self.links_asked.append(link)
        if link >= self.links:  # NVML: "NVML_ERROR_INVALID_ARGUMENT if device or link is invalid"
            raise _error(REAL.NVML_ERROR_INVALID_ARGUMENT)
        return 1  # NVML_FEATURE_ENABLED: every link of the recording is up

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


class RecordedMigNvml(RecordedNvml):
    """The H100 of h100-80gb-mig-4inst-capture-idle-load.txt, load state: MIG on, four
    instances (the default table's "MIG devices" rows; profiles from SOURCES.md)."""

    links = 0
    link_count_field = False
    # (name, GPU instance id, used MiB, total MiB, SMs) of MIG devices 0-3
    MIG = (
        ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 2, 11091, 40448, 60),
        ("NVIDIA H100 80GB HBM3 MIG 2g.20gb", 3, 17, 20096, 32),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 9, 9, 9984, 16),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 10, 9, 9984, 16),
    )
    nvmlDeviceGetUtilizationRates = RecordedNvml._unsupported  # "utilization.gpu = [N/A]"

    def nvmlDeviceGetName(self, handle: str) -> str:
        return self.MIG[int(handle[3:])][0] if handle.startswith("mig") else "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMigMode(self, handle: str) -> tuple[int, int]:
        return (1, 1)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: str) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: str, index: int) -> str:
        if index >= len(self.MIG):
            raise _error(REAL.NVML_ERROR_NOT_FOUND)
        return f"mig{index}"

    def nvmlDeviceGetGpuInstanceId(self, handle: str) -> int:
        return self.MIG[int(handle[3:])][1]

    def nvmlDeviceGetAttributes_v2(self, handle: str) -> Any:
        return SimpleNamespace(multiprocessorCount=self.MIG[int(handle[3:])][4])

    def nvmlDeviceGetMemoryInfo(self, handle: str, version: int | None = None) -> Any:
        if handle.startswith("mig"):
            _, _, used, total, _ = self.MIG[int(handle[3:])]
            return SimpleNamespace(total=total * MIB, used=used * MIB, free=(total - used) * MIB)
        return SimpleNamespace(total=81559 * MIB, used=11125 * MIB, free=70434 * MIB)

    def nvmlDeviceGetNvLinkState(self, handle: str, link: int) -> int:
        self.links_asked.append(link)
        # nvidia-smi nvlink -s: "Nvlink queries are not supported for Devices in MIG mode"
        raise _error(REAL.NVML_ERROR_NOT_SUPPORTED)


def _doctor_gpus(fake: RecordedNvml, monkeypatch) -> tuple[tuple[Any, ...], Any]:
    monkeypatch.setattr(nvml_gate, "_module", lambda: fake)
    with nvml_gate.open_session() as nv:
        return nvidia._gpus(nv, 1)


def _monitor_gpu(fake: RecordedNvml, monkeypatch) -> Any:
    monkeypatch.setattr(nvml_gate, "_module", lambda: fake)
    source = NvmlSource(xid_events=False)
    try:
        return source.read_gpu(0)
    finally:
        source.close()


@pytest.mark.parametrize("fake_class", [RecordedNvml, RecordedMigNvml])
def test_doctor_and_monitor_build_the_same_gpu(fake_class, monkeypatch) -> None:
    (doctor_gpu,), _ = _doctor_gpus(fake_class(), monkeypatch)
    monitor_gpu = _monitor_gpu(fake_class(), monkeypatch)
    # The only difference: doctor's snapshot skips the two 20 ms PCIe throughput samples.
    assert doctor_gpu == dataclasses.replace(
        monitor_gpu, pcie_tx_bytes_per_second=None, pcie_rx_bytes_per_second=None
    )
    # Fields the two readers used to disagree on.
    assert doctor_gpu.memory_clock_mhz == 3201 and doctor_gpu.memory_clock_max_mhz == 3201
    assert doctor_gpu.memory_temperature_c == 40.0
    assert monitor_gpu.persistence_mode is True


def test_mig_instances_come_with_profile_instance_memory_and_sms(monkeypatch) -> None:
    (gpu,), links = _doctor_gpus(RecordedMigNvml(), monkeypatch)
    assert gpu.mig_mode_enabled is True and gpu.utilization_gpu_percent is None
    assert [(m.index, m.profile, m.gpu_instance_id, m.sm_count) for m in gpu.mig_devices] == [
        (0, "3g.40gb", 2, 60),
        (1, "2g.20gb", 3, 32),
        (2, "1g.10gb", 9, 16),
        (3, "1g.10gb", 10, 16),
    ]
    # "11091MiB / 40448MiB" for MIG device 0
    first = gpu.mig_devices[0]
    assert (first.memory_used_bytes, first.memory_total_bytes) == (11091 * MIB, 40448 * MIB)
    assert links is None  # MIG mode: NVML answers no link, so nothing is claimed about NVLink


def test_nvlink_is_read_for_the_links_the_device_has(recorded) -> None:
    source = NvmlSource(xid_events=False)
    try:
        gpu = source.read_gpu(0)
        source.read_gpu(0)
    finally:
        source.close()
    # Every link's counter once, KiB -> bytes.
    assert gpu.nvlink_tx_bytes == sum(1000 + link for link in range(H200_LINKS)) * 1024
    assert gpu.nvlink_rx_bytes == sum(2000 + link for link in range(H200_LINKS)) * 1024
    scopes = [r[1] for r in recorded.field_requests if isinstance(r, tuple)]
    assert max(scopes) == H200_LINKS - 1  # never past the device's last link (NVML knows 36)
    assert len(scopes) == 2 * 2 * H200_LINKS  # TX and RX, two readings
    # The link count was read once (static), from NVML_FI_DEV_NVLINK_LINK_COUNT.
    assert recorded.field_requests.count(REAL.NVML_FI_DEV_NVLINK_LINK_COUNT) == 1
    assert recorded.links_asked == []


def test_doctor_counts_active_links_of_each_gpu(recorded) -> None:
    with nvml_gate.open_session() as nv:
        _, links = nvidia._gpus(nv, 1)
    assert links == (H200_LINKS,)
    assert recorded.links_asked == list(range(H200_LINKS))


def test_link_count_without_the_field_stops_at_the_first_link_nvml_refuses(monkeypatch) -> None:
    fake = RecordedNvml()
    fake.link_count_field = False
    monkeypatch.setattr(nvml_gate, "_module", lambda: fake)
    with nvml_gate.open_session() as nv:
        assert nvml_gpu.nvlink_link_count(nv, "gpu0") == H200_LINKS
    # Links 0-17 answer, 18 is INVALID_ARGUMENT: 19 questions, not NVML_NVLINK_MAX_LINKS.
    assert fake.links_asked == list(range(H200_LINKS + 1))
    assert REAL.NVML_NVLINK_MAX_LINKS > H200_LINKS + 1


def test_an_unknown_nvml_function_raises_at_once() -> None:
    session = nvml_gate.NvmlSession(REAL)
    with pytest.raises(nvml_gate.UnknownNvmlFunction, match="nvmlDeviceGetPowerUsge"):
        session.get("nvmlDeviceGetPowerUsge", None)
    with pytest.raises(nvml_gate.UnknownNvmlFunction):
        session.first(("nvmlDeviceGetPowerUsge", "nvmlDeviceGetPowrUsage"), None)
    assert issubclass(nvml_gate.UnknownNvmlFunction, AttributeError)
    assert not issubclass(nvml_gate.UnknownNvmlFunction, REAL.NVMLError)


# How dlrig names a binding attribute: a string given to NvmlSession.get/first or getattr
# ("nvmlDeviceGetPowerUsage", "NVML_FI_DEV_MEMORY_TEMP"), or an attribute of the module, which
# dlrig's code always calls `nvml` (nvml.NVML_CLOCK_SM, nv.nvml.nvmlEventSetCreate).
_NVML_NAME = (
    re.compile(r"""["']((?:nvml|NVML_|NVMLError_|c_nvml)[A-Za-z0-9_]+)["']"""),
    re.compile(r"\bnvml\.((?:nvml|NVML|c_nvml)[A-Za-z0-9_]*)"),
)


def test_every_nvml_name_dlrig_uses_exists_in_the_installed_binding() -> None:
    used: dict[str, str] = {}
    for path in sorted((ROOT / "src" / "dlrig").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        for pattern in _NVML_NAME:
            for name in pattern.findall(text):
                used.setdefault(name, str(path.relative_to(ROOT)))
    # The sampler's and doctor's calls, the constants they pass and the errors they catch.
    assert len(used) > 60, sorted(used)
    missing = {name: where for name, where in used.items() if not hasattr(REAL, name)}
    assert not missing, missing

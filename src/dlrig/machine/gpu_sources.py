"""Where the monitor's GPU readings come from: NVML on the live machine, or a recording.

A source answers `read_gpu(index)` with a `Gpu` reading and hands over Xid events as they
arrive. Both sources are built once and read many times: NVML stays initialised for the life of
the sampler (one `nvidia-smi -q -x` costs ~0.4 s and wakes idle GPUs; an NVML reading costs
microseconds per call), and a recording is parsed once, not at every sample.

Reads may be slow or never return (a GPU in trouble can hang an NVML call for minutes); the
sampler calls `read_gpu` from one worker thread per GPU with a deadline, so a source never has
to guard against that itself. NVML is documented as thread-safe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import socket
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from dlrig.errors import InputError
from dlrig.inputs import read_text
from dlrig.machine.model import (
    Gpu,
    MigDevice,
    PcieLink,
    XidEvent,
)
from dlrig.machine.nvidia import memory_health, memory_info, running_processes
from dlrig.machine.nvml import (
    GpuLost,
    NvmlSession,
    NvmlUnavailable,
    clock_event_names,
    end_session,
    start_session,
)
from dlrig.machine.readers import MAX_INPUT_BYTES, load_text, nvsmi_capture
from dlrig.machine.readers.common import catalogue_id_for

__all__ = ["GpuLost", "GpuSource", "NvmlSource", "ReplaySource", "SourceInfo"]


@dataclass(frozen=True)
class SourceInfo:
    kind: str  # nvml | replay
    description: str
    hostname: str
    gpu_count: int
    driver_version: str | None = None
    cuda_version: str | None = None


class GpuSource(Protocol):
    info: SourceInfo

    def read_gpu(self, index: int) -> Gpu:
        """One reading of GPU `index`; raises GpuLost when it is gone."""
        ...

    def drain_xid(self) -> list[XidEvent]:
        """Xid events that arrived since the previous call."""
        ...

    def advance(self, now: float) -> None:
        """Called once per sampling round before the reads (a replay picks its frame)."""
        ...

    def close(self, calls_in_flight: bool = False) -> None:
        """Release the source; `calls_in_flight`: some read has not returned yet."""
        ...


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


# --- NVML --------------------------------------------------------------------------------


_GPM_METRICS = (  # (NVML constant name, Gpu field)
    ("NVML_GPM_METRIC_GRAPHICS_UTIL", "graphics_activity_percent"),
    ("NVML_GPM_METRIC_SM_UTIL", "sm_activity_percent"),
    ("NVML_GPM_METRIC_SM_OCCUPANCY", "sm_occupancy_percent"),
    ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", "tensor_activity_percent"),
    ("NVML_GPM_METRIC_DRAM_BW_UTIL", "dram_activity_percent"),
)


class NvmlSource:
    """Live GPUs through NVML. Raises NvmlUnavailable (with NVML's reason) when it cannot start."""

    def __init__(self, xid_events: bool = True) -> None:
        self._nv: NvmlSession = start_session(raise_lost=True)
        try:
            self._start(xid_events)
        except GpuLost as exc:
            end_session(self._nv)
            raise NvmlUnavailable(f"a GPU is lost ({exc}); reset it or reboot") from None
        except BaseException:
            end_session(self._nv)
            raise

    def _start(self, xid_events: bool) -> None:
        nv = self._nv
        count = int(nv.get("nvmlDeviceGetCount") or 0)
        self._handles: list[Any] = []
        self._lost_at_start: set[int] = set()
        for index in range(count):
            try:
                self._handles.append(nv.get("nvmlDeviceGetHandleByIndex", index))
            except GpuLost:
                self._handles.append(None)
                self._lost_at_start.add(index)
        self._static: dict[int, Gpu] = {}
        self._gpm_previous: dict[int, Any] = {}
        self._gpm_supported: dict[int, bool] = {}
        cuda = nv.first(("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"))
        self.info = SourceInfo(
            kind="nvml",
            description=f"NVML, {count} GPU(s)",
            hostname=socket.gethostname(),
            gpu_count=count,
            driver_version=nv.get("nvmlSystemGetDriverVersion"),
            cuda_version=f"{cuda // 1000}.{(cuda % 1000) // 10}" if cuda else None,
        )
        self._xid: queue.SimpleQueue[XidEvent] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._xid_thread: threading.Thread | None = None
        if xid_events and count:
            self._xid_thread = threading.Thread(
                target=self._watch_xid, name="dlrig-nvml-xid", daemon=True
            )
            self._xid_thread.start()

    # Identity, limits and maxima do not change while the driver is loaded: read them once.
    def _static_part(self, index: int, handle: Any) -> Gpu:
        cached = self._static.get(index)
        if cached is not None:
            return cached
        nv, nvml = self._nv, self._nv.nvml
        name = nv.get("nvmlDeviceGetName", handle) or "unknown NVIDIA GPU"
        pci = nv.get("nvmlDeviceGetPciInfo", handle)
        bus_id = getattr(pci, "busId", None) if pci is not None else None
        if isinstance(bus_id, bytes):
            bus_id = bus_id.decode()
        capability = nv.get("nvmlDeviceGetCudaComputeCapability", handle)
        memory = nv.get("nvmlDeviceGetMemoryInfo", handle)
        gen_max = [
            g
            for g in (
                nv.get("nvmlDeviceGetMaxPcieLinkGeneration", handle),
                nv.get("nvmlDeviceGetGpuMaxPcieLinkGeneration", handle),
            )
            if g
        ]
        default_mw = nv.get("nvmlDeviceGetPowerManagementDefaultLimit", handle)
        ecc_mode = nv.get("nvmlDeviceGetEccMode", handle)
        gpu = Gpu(
            index=index,
            name=name,
            uuid=nv.get("nvmlDeviceGetUUID", handle),
            pci_bus_id=bus_id,
            catalogue_id=catalogue_id_for(name),
            serial=nv.get("nvmlDeviceGetSerial", handle),
            vbios_version=nv.get("nvmlDeviceGetVbiosVersion", handle),
            memory_total_bytes=int(memory.total) if memory else None,
            compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
            pcie=PcieLink(
                gen_max=min(gen_max) if gen_max else None,
                width_max=nv.get("nvmlDeviceGetMaxPcieLinkWidth", handle),
            ),
            power_default_limit_watts=default_mw / 1000 if default_mw is not None else None,
            temperature_slowdown_c=nv.get(
                "nvmlDeviceGetTemperatureThreshold",
                handle,
                nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
            ),
            ecc_mode_enabled=None if ecc_mode is None else ecc_mode[0] == 1,
            ecc_mode_pending=None if ecc_mode is None else ecc_mode[1] == 1,
            sm_clock_max_mhz=nv.get("nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_SM),
            memory_clock_max_mhz=nv.get("nvmlDeviceGetMaxClockInfo", handle, nvml.NVML_CLOCK_MEM),
        )
        self._static[index] = gpu
        return gpu

    def read_gpu(self, index: int) -> Gpu:
        if index >= len(self._handles):
            raise GpuLost(f"GPU {index} is not among the {len(self._handles)} NVML listed")
        if index in self._lost_at_start:
            raise GpuLost(f"GPU {index} was lost when NVML started")
        if self._handles[index] is None:
            # Lost GPUs raised GpuLost when their handle was asked for; this one was refused
            # for another reason (no permission to the device, for one).
            reason = next((e for e in reversed(self._nv.errors) if "HandleByIndex" in e), "")
            raise RuntimeError(f"NVML gave no handle for GPU {index} {reason}".strip())
        handle = self._handles[index]
        nv, nvml = self._nv, self._nv.nvml
        static = self._static_part(index, handle)
        memory = memory_info(nv, handle)
        utilization = nv.get("nvmlDeviceGetUtilizationRates", handle)
        reasons = nv.first(
            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
            handle,
        )
        power_mw = nv.get("nvmlDeviceGetPowerUsage", handle)
        limit_mw = nv.get("nvmlDeviceGetEnforcedPowerLimit", handle)
        energy_mj = nv.get("nvmlDeviceGetTotalEnergyConsumption", handle)
        pstate = nv.get("nvmlDeviceGetPerformanceState", handle)
        mig_mode = nv.get("nvmlDeviceGetMigMode", handle)
        # NVML reports PCIe throughput in KB/s (1000 bytes) averaged over 20 ms.
        tx_kb = nv.get("nvmlDeviceGetPcieThroughput", handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
        rx_kb = nv.get("nvmlDeviceGetPcieThroughput", handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
        memory_temp = self._field(handle, getattr(nvml, "NVML_FI_DEV_MEMORY_TEMP", None))

        ecc_errors, retired_pages, remapped_rows = memory_health(nv, handle)
        nvlink_tx, nvlink_rx = self._nvlink_bytes(handle)
        return dataclasses.replace(
            static,
            memory_used_bytes=int(memory.used) if memory else None,
            pcie=dataclasses.replace(
                static.pcie,
                gen_current=nv.get("nvmlDeviceGetCurrPcieLinkGeneration", handle),
                width_current=nv.get("nvmlDeviceGetCurrPcieLinkWidth", handle),
            ),
            performance_state=f"P{pstate}" if pstate is not None else None,
            power_draw_watts=power_mw / 1000 if power_mw is not None else None,
            power_limit_watts=limit_mw / 1000 if limit_mw is not None else None,
            temperature_c=nv.get("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU),
            memory_temperature_c=float(memory_temp) if memory_temp else None,
            clocks_event_reasons=clock_event_names(int(reasons)) if reasons is not None else None,
            ecc_errors=ecc_errors,
            retired_pages=retired_pages,
            remapped_rows=remapped_rows,
            mig_mode_enabled=None if mig_mode is None else mig_mode[0] == 1,
            mig_devices=self._mig(handle) if mig_mode is not None and mig_mode[0] == 1 else (),
            utilization_gpu_percent=float(utilization.gpu) if utilization else None,
            utilization_memory_percent=float(utilization.memory) if utilization else None,
            sm_clock_mhz=nv.get("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM),
            memory_clock_mhz=nv.get("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_MEM),
            fan_speed_percent=_float(nv.get("nvmlDeviceGetFanSpeed", handle)),
            energy_consumed_joules=energy_mj / 1000 if energy_mj is not None else None,
            pcie_tx_bytes_per_second=tx_kb * 1000.0 if tx_kb is not None else None,
            pcie_rx_bytes_per_second=rx_kb * 1000.0 if rx_kb is not None else None,
            pcie_replay_errors=nv.get("nvmlDeviceGetPcieReplayCounter", handle),
            nvlink_tx_bytes=nvlink_tx,
            nvlink_rx_bytes=nvlink_rx,
            processes=running_processes(nv, handle),
            **self._gpm_or_nothing(index, handle),
        )

    def _field(self, handle: Any, field_id: int | None) -> float | None:
        if field_id is None:
            return None
        values = self._nv.get("nvmlDeviceGetFieldValues", handle, [field_id])
        if not values or values[0].nvmlReturn != 0:
            return None
        return _field_value(values[0])

    def _nvlink_bytes(self, handle: Any) -> tuple[int | None, int | None]:
        nvml = self._nv.nvml
        tx_id = getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None)
        rx_id = getattr(nvml, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None)
        links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
        if tx_id is None or rx_id is None:
            return None, None
        request = [(tx_id, link) for link in range(links)] + [
            (rx_id, link) for link in range(links)
        ]
        values = self._nv.get("nvmlDeviceGetFieldValues", handle, request)
        if not values:
            return None, None
        tx = rx = None
        for i, value in enumerate(values):
            if value.nvmlReturn != 0:
                continue
            kib = _field_value(value)
            if kib is None:
                continue
            if i < links:
                tx = (tx or 0) + int(kib) * 1024  # the counters are in KiB
            else:
                rx = (rx or 0) + int(kib) * 1024
        return tx, rx

    def _gpm_or_nothing(self, index: int, handle: Any) -> dict[str, Any]:
        try:
            return self._gpm(index, handle)
        except (TypeError, ValueError, AttributeError):
            # A binding whose GPM structures differ from this one's: go without GPM rather
            # than fail every reading of the GPU.
            self._gpm_supported[index] = False
            return {}

    def _gpm(self, index: int, handle: Any) -> dict[str, Any]:
        """SM activity, occupancy, tensor and DRAM activity between two GPM samples."""
        nv, nvml = self._nv, self._nv.nvml
        if index not in self._gpm_supported:
            support = nv.get("nvmlGpmQueryDeviceSupport", handle)
            self._gpm_supported[index] = bool(support and support.isSupportedDevice)
        if not self._gpm_supported[index]:
            return {}
        current = nv.get("nvmlGpmSampleAlloc")
        if current is None:
            return {}
        try:
            taken = nv.get("nvmlGpmSampleGet", handle, current)
        except GpuLost:
            nv.get("nvmlGpmSampleFree", current)
            raise
        if taken is None:  # a transient failure: try again at the next sample
            nv.get("nvmlGpmSampleFree", current)
            return {}
        previous = self._gpm_previous.get(index)
        self._gpm_previous[index] = current
        if previous is None:
            return {}
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version = nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(_GPM_METRICS)
        request.sample1 = previous
        request.sample2 = current
        for i, (constant, _) in enumerate(_GPM_METRICS):
            request.metrics[i].metricId = getattr(nvml, constant)
        answer = nv.get("nvmlGpmMetricsGet", request)
        nv.get("nvmlGpmSampleFree", previous)
        if answer is None:
            return {}
        result: dict[str, Any] = {}
        for i, (_, field) in enumerate(_GPM_METRICS):
            metric = answer.metrics[i]
            result[field] = float(metric.value) if metric.nvmlReturn == 0 else None
        return result

    def _mig(self, handle: Any) -> tuple[MigDevice, ...]:
        nv = self._nv
        devices = []
        for mig_index in range(nv.get("nvmlDeviceGetMaxMigDeviceCount", handle) or 0):
            mig = nv.get("nvmlDeviceGetMigDeviceHandleByIndex", handle, mig_index)
            if mig is None:
                continue
            memory = nv.get("nvmlDeviceGetMemoryInfo", mig)
            name = nv.get("nvmlDeviceGetName", mig) or ""
            # MIG device names end in the profile: "NVIDIA H100 80GB HBM3 MIG 3g.40gb".
            profile = name.rsplit("MIG ", 1)[1].strip() if "MIG " in name else None
            devices.append(
                MigDevice(
                    index=mig_index,
                    profile=profile,
                    gpu_instance_id=nv.get("nvmlDeviceGetGpuInstanceId", mig),
                    memory_total_bytes=int(memory.total) if memory else None,
                    memory_used_bytes=int(memory.used) if memory else None,
                )
            )
        return tuple(devices)

    def _watch_xid(self) -> None:
        """Wait on NVML's event set for Xid errors (the same reports as the kernel log)."""
        nvml = self._nv.nvml
        try:
            events = nvml.nvmlEventSetCreate()
        except nvml.NVMLError:
            return
        registered = 0
        for handle in self._handles:
            if handle is None:
                continue
            try:
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, events)
                registered += 1
            except nvml.NVMLError:
                continue  # GeForce cards before Turing and some vGPUs do not support it
        bus_ids: dict[int, str | None] = {}
        while registered and not self._stop.is_set():
            try:
                data = nvml.nvmlEventSetWait_v2(events, 500)
            except nvml.NVMLError as exc:
                if not isinstance(exc, getattr(nvml, "NVMLError_Timeout", ())):
                    self._stop.wait(1.0)
                continue
            try:
                if data.eventType != nvml.nvmlEventTypeXidCriticalError:
                    continue
                self._xid.put(
                    XidEvent(
                        code=int(data.eventData),
                        pci_bus_id=self._bus_id(data.device, bus_ids),
                        timestamp=now_iso(),
                    )
                )
            except Exception:  # noqa: BLE001 - the watcher must outlive any one odd event
                continue
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlEventSetFree(events)

    def _bus_id(self, device: Any, cache: dict[int, str | None]) -> str | None:
        """The PCI address of an event's device. A lost GPU (Xid 79) cannot be asked, so the
        addresses read when the handles were opened come first."""
        for index, handle in enumerate(self._handles):
            if handle is not None and _same_handle(handle, device):
                static = self._static.get(index)
                if static is not None and static.pci_bus_id:
                    return static.pci_bus_id
        key = id(device)
        if key not in cache:
            try:
                pci = self._nv.get("nvmlDeviceGetPciInfo", device) if device else None
            except GpuLost:
                pci = None
            bus = getattr(pci, "busId", None) if pci is not None else None
            cache[key] = bus.decode() if isinstance(bus, bytes) else bus
        return cache[key]

    def drain_xid(self) -> list[XidEvent]:
        drained = []
        while True:
            try:
                drained.append(self._xid.get_nowait())
            except queue.Empty:
                return drained

    def advance(self, now: float) -> None:
        return None

    def close(self, calls_in_flight: bool = False) -> None:
        """Stop the Xid watcher and shut NVML down. With a call still stuck inside NVML, leave
        the library alone: shutting it down under that call can block for ever."""
        self._stop.set()
        if self._xid_thread is not None:
            self._xid_thread.join(timeout=2.0)
        if calls_in_flight:
            return
        for sample in self._gpm_previous.values():
            self._nv.get("nvmlGpmSampleFree", sample)
        self._gpm_previous.clear()
        end_session(self._nv)


def _same_handle(a: Any, b: Any) -> bool:
    """NVML device handles are ctypes pointers: compare the addresses, not the objects."""
    import ctypes

    try:
        return bool(ctypes.cast(a, ctypes.c_void_p).value == ctypes.cast(b, ctypes.c_void_p).value)
    except (TypeError, ctypes.ArgumentError):
        return bool(a is b or a == b)


def _float(value: Any) -> float | None:
    return float(value) if value is not None else None


def _field_value(field: Any) -> float | None:
    """The number in an nvmlFieldValue_t, whatever its declared type."""
    kinds = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    attribute = kinds.get(int(field.valueType))
    if attribute is None:
        return None
    return float(getattr(field.value, attribute))


# --- Replay ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplayFrame:
    label: str  # "h200-capture.txt:load"
    state: str | None  # the capture's machine state, if any
    gpus: tuple[Gpu, ...]


class ReplaySource:
    """Plays recorded nvidia-smi outputs as if they were live GPUs.

    Every file is parsed once. A capture with idle and load states, or several files, become
    successive frames; the replay moves to the next frame every `frame_seconds` (or stays on the
    frames of `state`). Kernel logs among the files feed their Xid lines as events, once.
    `replicate` copies the GPUs of each frame N times (load-testing an 8-GPU setup with a
    1-GPU recording); the copies get distinct indices and UUIDs with a "-replica-N" suffix.
    """

    def __init__(
        self,
        paths: Sequence[str | Path],
        state: str | None = None,
        frame_seconds: float = 30.0,
        replicate: int | None = None,
    ) -> None:
        if not paths:
            raise InputError("--replay needs at least one file", fix="give a recorded file")
        if frame_seconds <= 0:
            raise InputError(
                f"replay frame time {frame_seconds} s is not positive", fix="give seconds > 0"
            )
        if replicate is not None and not 1 <= replicate <= 1024:
            raise InputError(
                f"--replicate {replicate} is out of range", fix="give a count from 1 to 1024"
            )
        frames: list[ReplayFrame] = []
        xid: list[XidEvent] = []
        driver: str | None = None
        cuda: str | None = None
        hostname: str | None = None
        for path in paths:
            text = read_text(path, "replay file", MAX_INPUT_BYTES)
            name = Path(path).name
            if nvsmi_capture.looks_like(text):
                header, sections = nvsmi_capture.split_sections(text)
                machine = load_text(text, str(path))
                for capture_state in nvsmi_capture.states(sections):
                    frames.append(
                        ReplayFrame(
                            f"{name}:{capture_state}",
                            capture_state,
                            _renumbered(nvsmi_capture.gpus_for_state(sections, capture_state)),
                        )
                    )
                hostname = hostname or header.get("hostname")
            else:
                machine = load_text(text, str(path))
                if machine.kernel_log is not None and not machine.gpus:
                    xid.extend(machine.kernel_log.xid_events)
                    continue
                if not machine.gpus:
                    raise InputError(
                        f"{path}: has no GPU readings to replay",
                        fix="give nvidia-smi -q -x, --query-gpu CSV, -q text or a capture",
                    )
                frames.append(ReplayFrame(name, None, _renumbered(machine.gpus)))
            if machine.driver is not None:
                driver = driver or machine.driver.version
                cuda = cuda or machine.driver.cuda_version
        if not frames:
            raise InputError(
                "the replay files hold no GPU readings (only kernel logs)",
                fix="add an nvidia-smi recording next to the kernel log",
            )
        if state is not None:
            chosen = [f for f in frames if f.state == state]
            if not chosen:
                have = sorted({f.state for f in frames if f.state})
                raise InputError(
                    f"--replay-state {state!r} is not in the recording",
                    fix=f"pick one of: {', '.join(have)}" if have else "drop --replay-state",
                )
            frames = chosen
        if replicate:
            frames = [_replicated(f, replicate) for f in frames]
        self._frames = frames
        self._frame_seconds = frame_seconds
        self._started: float | None = None
        self._current = frames[0]
        self._xid = xid
        self.info = SourceInfo(
            kind="replay",
            description="replay of " + ", ".join(Path(p).name for p in paths),
            hostname=hostname or socket.gethostname(),
            gpu_count=max(len(f.gpus) for f in frames),
            driver_version=driver,
            cuda_version=cuda,
        )

    @property
    def frames(self) -> tuple[ReplayFrame, ...]:
        return tuple(self._frames)

    @property
    def current_frame(self) -> ReplayFrame:
        return self._current

    def advance(self, now: float) -> None:
        if self._started is None:
            self._started = now
        step = int((now - self._started) / self._frame_seconds)
        self._current = self._frames[step % len(self._frames)]

    def read_gpu(self, index: int) -> Gpu:
        gpus = self._current.gpus
        if index >= len(gpus):
            raise GpuLost(f"GPU {index} is not in {self._current.label}")
        return gpus[index]

    def drain_xid(self) -> list[XidEvent]:
        drained, self._xid = self._xid, []
        stamped = [dataclasses.replace(e, timestamp=e.timestamp or now_iso()) for e in drained]
        return stamped

    def close(self, calls_in_flight: bool = False) -> None:
        return None


def _renumbered(gpus: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
    """GPUs numbered 0..n-1 in file order (a recording of `-i 2,3` replays as GPUs 0 and 1),
    the numbers the sampler gives its readings."""
    return tuple(dataclasses.replace(gpu, index=i) for i, gpu in enumerate(gpus))


def _replicated(frame: ReplayFrame, copies: int) -> ReplayFrame:
    gpus = []
    for copy in range(copies):
        for gpu in frame.gpus:
            index = copy * len(frame.gpus) + gpu.index
            uuid = gpu.uuid if copy == 0 or gpu.uuid is None else f"{gpu.uuid}-replica-{copy}"
            gpus.append(dataclasses.replace(gpu, index=index, uuid=uuid))
    return ReplayFrame(frame.label, frame.state, tuple(gpus))

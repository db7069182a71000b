"""Live GPUs through NVML, for the monitor's sampler.

NVML stays initialised for the life of the source: one `nvidia-smi -q -x` costs ~0.4 s and wakes
idle GPUs, an NVML reading costs microseconds per call. Each GPU is read by
`dlrig.machine.nvml_gpu.read_gpu`, the reader doctor uses too; on top of it this source keeps
what needs state between readings: the static part of each GPU, GPM samples (SM and tensor
activity are the difference of two) and a thread that waits on NVML's Xid event set.
NVML is documented as thread-safe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import queue
import socket
import threading
from typing import Any

from dlrig.machine.gpu_source_base import SourceInfo, now_iso
from dlrig.machine.model import Gpu, XidEvent
from dlrig.machine.nvml import GpuLost, NvmlSession, NvmlUnavailable, end_session, start_session
from dlrig.machine.nvml_gpu import StaticPart, read_gpu, read_static

_GPM_METRICS = (  # (NVML constant name, Gpu field)
    ("NVML_GPM_METRIC_GRAPHICS_UTIL", "graphics_activity_percent"),
    ("NVML_GPM_METRIC_SM_UTIL", "sm_activity_percent"),
    ("NVML_GPM_METRIC_SM_OCCUPANCY", "sm_occupancy_percent"),
    ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", "tensor_activity_percent"),
    ("NVML_GPM_METRIC_DRAM_BW_UTIL", "dram_activity_percent"),
)


def cuda_version_text(value: int | None) -> str | None:
    """NVML's CUDA driver version (12020) as nvidia-smi prints it ("12.2")."""
    return f"{value // 1000}.{(value % 1000) // 10}" if value else None


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
        self._static: dict[int, StaticPart] = {}
        self._gpm_previous: dict[int, Any] = {}
        self._gpm_supported: dict[int, bool] = {}
        cuda = nv.first(("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"))
        self.info = SourceInfo(
            kind="nvml",
            description=f"NVML, {count} GPU(s)",
            hostname=socket.gethostname(),
            gpu_count=count,
            driver_version=nv.get("nvmlSystemGetDriverVersion"),
            cuda_version=cuda_version_text(cuda),
        )
        self._xid: queue.SimpleQueue[XidEvent] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._closed = False
        self._xid_thread: threading.Thread | None = None
        if xid_events and count:
            self._xid_thread = threading.Thread(
                target=self._watch_xid, name="dlrig-nvml-xid", daemon=True
            )
            self._xid_thread.start()

    def read_gpu(self, index: int) -> Gpu:
        if index >= len(self._handles):
            raise GpuLost(f"GPU {index} is not among the {len(self._handles)} NVML listed")
        if index in self._lost_at_start:
            raise GpuLost(f"GPU {index} was lost when NVML started")
        handle = self._handles[index]
        if handle is None:
            # Lost GPUs raised GpuLost when their handle was asked for; this one was refused
            # for another reason (no permission to the device, for one).
            reason = next((e for e in reversed(self._nv.errors) if "HandleByIndex" in e), "")
            raise RuntimeError(f"NVML gave no handle for GPU {index} {reason}".strip())
        static = self._static.get(index)
        if static is None:
            static = self._static[index] = read_static(self._nv, handle, index)
        gpu = read_gpu(self._nv, handle, index, static=static)
        activity = self._gpm_or_nothing(index, handle)
        return dataclasses.replace(gpu, **activity) if activity else gpu

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
                if static is not None and static.gpu.pci_bus_id:
                    return static.gpu.pci_bus_id
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
        if calls_in_flight or self._closed:
            return
        self._closed = True
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

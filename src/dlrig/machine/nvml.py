"""The one gate to NVML (NVIDIA's management library, through `nvidia-ml-py`).

Every NVML call in dlrig goes through `NvmlSession.get`, which turns NVML's "not supported",
"no permission" and "GPU is lost" errors into None: a GeForce card without ECC, or a MIG GPU
without utilisation counters, is data, not a crash. NVML never initialises a CUDA context, so
probing through it is safe on a busy training box.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


class NvmlUnavailable(Exception):
    """NVML cannot be used here; the message says why (no library, no driver, mismatch)."""


def _module() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - a core dependency
        raise NvmlUnavailable("the Python package nvidia-ml-py is not installed") from exc
    return pynvml


class GpuLost(Exception):
    """NVML says the GPU is gone (fell off the bus, or reset): later calls will fail too."""


class UnknownNvmlFunction(AttributeError):
    """The binding has no function of that name: a typo or a binding too old for dlrig.

    Raised at once rather than read as "not supported": a misspelt name would otherwise turn a
    reading into None on every GPU, for ever, without a word.
    """


class NvmlSession:
    """An initialised NVML; use `open_session()` to get one.

    With `raise_lost`, a "GPU is lost" answer raises GpuLost instead of reading as None, so a
    long-running sampler can tell a GPU that vanished from one that lacks a counter.
    """

    def __init__(self, module: Any, raise_lost: bool = False) -> None:
        self.nvml = module
        self.raise_lost = raise_lost
        self.errors: list[str] = []

    def _function(self, function: str) -> Callable[..., Any]:
        fn: Callable[..., Any] | None = getattr(self.nvml, function, None)
        if fn is None:
            raise UnknownNvmlFunction(
                f"the NVML binding (nvidia-ml-py) has no function {function!r}"
            )
        return fn

    def get(self, function: str, *args: Any) -> Any:
        """nvml.<function>(*args), or None when NVML says it cannot answer.

        A driver whose libnvidia-ml lacks the symbol answers NVML_ERROR_FUNCTION_NOT_FOUND, an
        NVMLError like any other: None. A name the Python binding itself lacks raises
        UnknownNvmlFunction.
        """
        fn = self._function(function)
        try:
            value = fn(*args)
        except self.nvml.NVMLError as exc:
            lost = getattr(self.nvml, "NVMLError_GpuIsLost", None)
            if self.raise_lost and lost is not None and isinstance(exc, lost):
                raise GpuLost(f"{function}: {exc}") from None
            # A sampler runs for weeks: keep the first errors, not all of them.
            if not isinstance(exc, self.nvml.NVMLError_NotSupported) and len(self.errors) < 100:
                self.errors.append(f"{function}: {exc}")
            return None
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        return value

    def first(self, functions: tuple[str, ...], *args: Any) -> Any:
        """The first of several equivalent calls that answers (APIs renamed across drivers).

        Names an older binding lacks are passed over; when the binding has none of them, that
        is a typo, and it raises."""
        known = [function for function in functions if hasattr(self.nvml, function)]
        if not known:
            raise UnknownNvmlFunction(
                f"the NVML binding (nvidia-ml-py) has none of {', '.join(functions)}"
            )
        for function in known:
            value = self.get(function, *args)
            if value is not None:
                return value
        return None

    def field_values(self, handle: Any, requests: list[Any]) -> list[Any] | None:
        """nvmlDeviceGetFieldValues: one answer per request (a field id, or (field id, scope
        id) for per-link fields), each with its own nvmlReturn; None when the call fails."""
        values = self.get("nvmlDeviceGetFieldValues", handle, requests)
        return None if values is None else list(values)


# Where the NVIDIA GPU operator puts the driver (its driver container's root, shared with the
# host): a node managed by it has no libnvidia-ml.so.1 (and no nvidia-smi) on the host's own
# paths (NVIDIA/gpu-operator#2137). DLRIG_NVIDIA_DRIVER_ROOT names another root.
DRIVER_ROOTS = ("/run/nvidia/driver",)
_LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib/aarch64-linux-gnu", "usr/lib")


def driver_root_libraries(roots: tuple[str, ...]) -> list[Path]:
    """The libnvidia-ml.so.1 files under these driver roots, in the order to try."""
    found = []
    for root in roots:
        for folder in _LIBRARY_DIRS:
            path = Path(root) / folder / "libnvidia-ml.so.1"
            if path.is_file():
                found.append(path)
    return found


def _load_from_driver_roots() -> bool:
    """Load NVML from a driver root: once a library of that soname is loaded, the binding's own
    CDLL("libnvidia-ml.so.1") gets it from the loader."""
    roots = tuple(filter(None, (os.environ.get("DLRIG_NVIDIA_DRIVER_ROOT"),))) + DRIVER_ROOTS
    for path in driver_root_libraries(roots):
        try:
            ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
            return True
        except OSError:
            continue
    return False


def start_session(raise_lost: bool = False) -> NvmlSession:
    """Initialise NVML for a long-lived user (the monitor's sampler); call `end_session`."""
    nvml = _module()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        missing = getattr(nvml, "NVML_ERROR_LIBRARY_NOT_FOUND", None)
        if getattr(exc, "value", None) != missing or not _load_from_driver_roots():
            raise NvmlUnavailable(str(exc)) from exc
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as again:
            raise NvmlUnavailable(str(again)) from again
    return NvmlSession(nvml, raise_lost=raise_lost)


def end_session(session: NvmlSession) -> None:
    with contextlib.suppress(session.nvml.NVMLError):
        session.nvml.nvmlShutdown()


@contextlib.contextmanager
def open_session() -> Iterator[NvmlSession]:
    """Initialise NVML for the duration of the block; NvmlUnavailable says why it cannot."""
    session = start_session()
    try:
        yield session
    finally:
        end_session(session)


# Bits of nvmlDeviceGetCurrentClocksEventReasons, named as nvidia-smi's XML names them.
CLOCK_EVENT_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clocks_setting"),
)


def clock_event_names(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in CLOCK_EVENT_BITS if mask & bit)


def clock_event_mask(names: tuple[str, ...]) -> int:
    """The NVML bitmask of named reasons (what DCGM's CLOCK_THROTTLE_REASONS field carries)."""
    known = dict((name, bit) for bit, name in CLOCK_EVENT_BITS)
    return sum(known.get(name, 0) for name in set(names))


# nvmlValueType_t: which member of the nvmlValue_t union a field value fills.
_VALUE_MEMBERS = {
    0: "dVal",
    1: "uiVal",
    2: "ulVal",
    3: "ullVal",
    4: "sllVal",
    5: "siVal",
    6: "usVal",
}


def field_number(value: Any) -> float | None:
    """The number in an nvmlFieldValue_t, whatever its declared type; None when NVML refused."""
    if int(value.nvmlReturn) != 0:
        return None
    member = _VALUE_MEMBERS.get(int(value.valueType))
    if member is None:
        return None
    return float(getattr(value.value, member))

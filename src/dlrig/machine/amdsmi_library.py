"""AMD GPUs through AMD's own library, libamd_smi, by its Python binding `amdsmi` (the package
the `amd-smi` tool itself is written on; ROCm 6.x and newer).

The binding is a thin ctypes layer: `import amdsmi` fails with a KeyError and prints two lines
to stdout when libamd_smi.so is not installed, and `amdsmi_init()` raises when the amdgpu driver
is not loaded. Both are data here ("not usable: why"), never a crash, and what the binding and
the library print (Python's print at import, C's printf in some calls) is kept out of dlrig's
output. Each call that the GPU does not support ("N/A", or an
AmdSmiLibraryException such as AMDSMI_STATUS_NOT_SUPPORTED) reads as None.

Units as the library returns them (recorded by ROCm/amdsmi's integration test on a Navi 21,
tests/python_unittest/README.md): PCIe speeds in MT/s (16000 is Gen 4), power in W but the
power limit in µW (272000000), memory from amdsmi_get_gpu_memory_* in bytes, temperatures in °C.
"""

from __future__ import annotations

import contextlib
import ctypes
import io
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from dlrig.machine.model import EccCounts, Gpu, PcieLink
from dlrig.machine.readers import values
from dlrig.machine.readers.common import catalogue_id_for


class AmdSmiUnavailable(Exception):
    """The amdsmi binding cannot be used here; the message says why."""


def load() -> Any:
    """The `amdsmi` module, imported without letting it print; AmdSmiUnavailable when it is
    not installed or cannot find libamd_smi.so."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            import amdsmi  # type: ignore[import-untyped,import-not-found,unused-ignore]
    except ImportError as exc:
        raise AmdSmiUnavailable("the Python package amdsmi is not installed") from exc
    except (OSError, KeyError, AttributeError) as exc:
        # 7.x: prints "Unable to find libamd_smi.so library ..." then raises KeyError
        said = next((line for line in printed.getvalue().splitlines() if line.strip()), "")
        raise AmdSmiUnavailable(
            f"amdsmi cannot load libamd_smi.so ({said.strip() or type(exc).__name__}); "
            "install ROCm's amd-smi-lib"
        ) from exc
    return amdsmi


# What a binding or library call may raise besides AmdSmiException on odd answers (undecodable
# names, an older binding without a function): read as "no answer", never as a crash.
_ODD_ANSWERS = (ValueError, TypeError, KeyError, AttributeError, OSError)


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """libamd_smi prints some answers with C's printf (the device UUID, the PCIe link): file
    descriptor 1 goes to /dev/null while it runs, so `--json` stays one document."""
    with contextlib.suppress(AttributeError, ValueError, OSError):
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        yield
        return
    sink = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(sink, 1)
        yield
    finally:
        with contextlib.suppress(OSError, AttributeError, TypeError):
            ctypes.CDLL(None).fflush(None)  # what C buffered goes to /dev/null, not later
        os.dup2(saved, 1)
        os.close(saved)
        os.close(sink)


def _number(raw: Any) -> float | None:
    """A reading: a number, or None for "N/A", negative sentinels and what is not one."""
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    return float(raw) if raw >= 0 else None


def _generation(mts: Any) -> int | None:
    number = _number(mts)
    return None if number is None else values.PCIE_GEN_BY_GTS.get(number / 1000)


def gpu_from_calls(index: int, calls: Mapping[str, Any]) -> Gpu:
    """One GPU from the library's answers, keyed by function name (`amdsmi_get_gpu_asic_info`,
    ...; the temperature and memory calls by their type: `temperature_edge`, `vram_total`).
    Absent or unsupported answers are None. A pure function: the probe and the tests both feed it.
    """

    def section(name: str) -> Mapping[str, Any]:
        found = calls.get(name)
        return found if isinstance(found, Mapping) else {}

    asic, activity = section("amdsmi_get_gpu_asic_info"), section("amdsmi_get_gpu_activity")
    power, ecc = section("amdsmi_get_power_info"), section("amdsmi_get_gpu_total_ecc_count")
    pcie = section("amdsmi_get_pcie_info")
    metric, static = pcie.get("pcie_metric"), pcie.get("pcie_static")
    link: Mapping[str, Any] = metric if isinstance(metric, Mapping) else {}
    most: Mapping[str, Any] = static if isinstance(static, Mapping) else {}
    name = values.json_text(asic.get("market_name")) or f"AMD GPU {index}"
    edge, hotspot = (
        _number(calls.get("temperature_edge")),
        _number(calls.get("temperature_hotspot")),
    )
    socket = _number(power.get("current_socket_power"))
    limit = _number(power.get("power_limit"))
    width, max_width = _number(link.get("pcie_width")), _number(most.get("max_pcie_width"))
    replays = _number(link.get("pcie_replay_count"))
    total, used = _number(calls.get("vram_total")), _number(calls.get("vram_used"))
    corrected = _number(ecc.get("correctable_count"))
    uncorrected = _number(ecc.get("uncorrectable_count"))
    return Gpu(
        index=index,
        name=name,
        vendor="amd",
        gfx_target=values.json_text(asic.get("target_graphics_version")),
        catalogue_id=catalogue_id_for(name),
        pci_bus_id=values.json_text(calls.get("amdsmi_get_gpu_device_bdf")),
        uuid=values.json_text(calls.get("amdsmi_get_gpu_device_uuid")),
        utilization_gpu_percent=_number(activity.get("gfx_activity")),
        utilization_memory_percent=_number(activity.get("umc_activity")),
        # MI300-class GPUs report the current socket power, older ones the average
        power_draw_watts=socket
        if socket is not None
        else _number(power.get("average_socket_power")),
        power_limit_watts=limit / 1e6 if limit else None,  # µW; 0 on APUs: no limit stated
        temperature_c=edge if edge is not None else hotspot,
        temperature_edge_c=edge,
        temperature_junction_c=hotspot,
        memory_temperature_c=_number(calls.get("temperature_vram")),
        memory_total_bytes=int(total) if total else None,
        memory_used_bytes=int(used) if used is not None and total else None,
        pcie=PcieLink(
            gen_current=_generation(link.get("pcie_speed")),
            gen_max=_generation(most.get("max_pcie_speed")),
            width_current=int(width) if width else None,
            width_max=int(max_width) if max_width else None,
        ),
        pcie_replay_errors=int(replays) if replays is not None else None,
        ecc_errors=EccCounts(
            volatile_corrected=int(corrected) if corrected is not None else None,
            volatile_uncorrected=int(uncorrected) if uncorrected is not None else None,
        ),
    )


def driver_version(calls: Mapping[str, Any]) -> str | None:
    """amdgpu's release from amdsmi_get_gpu_driver_info, where it can be told from the kernel's
    version: the in-kernel driver reports the kernel's ("6.9.2") with the upstream driver's
    fixed date 2015/01/01, which names no amdgpu release, so that answer is not taken."""
    info = calls.get("amdsmi_get_gpu_driver_info")
    if not isinstance(info, Mapping):
        return None
    version, date = (
        values.json_text(info.get("driver_version")),
        values.json_text(info.get("driver_date")),
    )
    if not version or not re.fullmatch(r"\d+\.\d+(\.\d+)?", version):
        return None
    return None if date is None or date.startswith("2015/01/01") else version


def start(module: Any) -> list[Any]:
    """amdsmi_init for the AMD GPUs, then their handles; AmdSmiUnavailable when the library
    cannot start (no amdgpu driver loaded, no permission)."""
    failure = (failure_of(module), *_ODD_ANSWERS)
    try:
        module.amdsmi_init(module.AmdSmiInitFlags.INIT_AMD_GPUS)
    except failure as exc:
        raise AmdSmiUnavailable(f"amdsmi_init failed: {_said(exc)}") from exc
    try:
        return list(module.amdsmi_get_processor_handles())
    except failure as exc:
        stop(module)  # initialised: shut down before giving up
        raise AmdSmiUnavailable(f"amdsmi found no GPU handles: {_said(exc)}") from exc


def _said(exc: BaseException) -> str:
    return " ".join(part.strip() for part in str(exc).strip().splitlines()) or type(exc).__name__


def stop(module: Any) -> None:
    with contextlib.suppress(failure_of(module), *_ODD_ANSWERS):
        module.amdsmi_shut_down()


def failure_of(module: Any) -> type[Exception]:
    """The binding's exception base (AmdSmiException)."""
    found = getattr(module, "AmdSmiException", Exception)
    return found if isinstance(found, type) and issubclass(found, Exception) else Exception


def read(module: Any) -> list[dict[str, Any]]:
    """The answers of every AMD GPU, as `gpu_from_calls` reads them."""
    with quiet():
        handles = start(module)
        try:
            return [answers(module, handle) for handle in handles]
        finally:
            stop(module)


def answers(module: Any, handle: Any) -> dict[str, Any]:
    """What the library says of one GPU, keyed as `gpu_from_calls` reads it."""
    failure = (failure_of(module), *_ODD_ANSWERS)

    def ask(function: Callable[..., Any], *args: Any) -> Any:
        try:
            return function(handle, *args)
        except failure:
            return None  # AMDSMI_STATUS_NOT_SUPPORTED and friends: not this GPU's

    answers: dict[str, Any] = {
        name: ask(getattr(module, name))
        for name in (
            "amdsmi_get_gpu_asic_info",
            "amdsmi_get_gpu_device_bdf",
            "amdsmi_get_gpu_device_uuid",
            "amdsmi_get_gpu_activity",
            "amdsmi_get_power_info",
            "amdsmi_get_pcie_info",
            "amdsmi_get_gpu_total_ecc_count",
            "amdsmi_get_gpu_driver_info",
        )
    }
    kind, metric = module.AmdSmiTemperatureType, module.AmdSmiTemperatureMetric.CURRENT
    for sensor in ("EDGE", "HOTSPOT", "VRAM"):
        answers[f"temperature_{sensor.lower()}"] = ask(
            module.amdsmi_get_temp_metric, getattr(kind, sensor), metric
        )
    vram = module.AmdSmiMemoryType.VRAM
    answers["vram_total"] = ask(module.amdsmi_get_gpu_memory_total, vram)
    answers["vram_used"] = ask(module.amdsmi_get_gpu_memory_usage, vram)
    return answers

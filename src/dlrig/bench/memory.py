"""Memory bandwidth: device copies against the GPU's memory bandwidth, host<->device copies
from pinned and pageable memory against the PCIe link's usable rate.

Copy bandwidth counts bytes read plus bytes written (2 × size / time) for device-to-device and
host memcpy, as memory-bandwidth benchmarks report it; host<->device counts the bytes moved
one way (size / time), the figure PCIe rates are quoted in.
"""

from __future__ import annotations

import time
from typing import Any

from dlrig.bench.device import BenchDevice, torch_module
from dlrig.bench.results import BenchResult, Progress, judged, no_progress
from dlrig.knowledge import pcie
from dlrig.machine.model import Gpu

DEVICE_COPY_BYTES = 1 << 30
HOST_COPY_BYTES = 256 << 20
OK_DEVICE_PERCENT = 70.0
OK_PCIE_PERCENT = 70.0  # pinned copies reach ~80-90% of the link; much lower means a bad link

_LINK_FIX = (
    "host<->device copies run well below the PCIe link's rate: check the link (`nvidia-smi -q "
    "-d PCI` while busy); a card in a narrower or lower-generation slot, a riser, or a BIOS "
    "setting caps it — reseat it in a full x16 CPU-attached slot"
)
_PAGEABLE_FIX = (
    "pageable copies are staged through a bounce buffer: use pinned memory "
    "(DataLoader(pin_memory=True), tensor.pin_memory()) and non_blocking=True copies"
)


def _seconds(device: BenchDevice, fn: Any, repeats: int) -> float:
    """Median time of `fn` over `repeats` runs after one warm-up."""
    fn()
    device.synchronize()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        device.synchronize()
        times.append(time.perf_counter() - started)
    times.sort()
    return times[len(times) // 2]


def run(
    device: BenchDevice,
    gpu: Gpu | None = None,
    repeats: int = 5,
    progress: Progress = no_progress,
) -> list[BenchResult]:
    """`gpu`: this GPU as NVML saw it (its PCIe link), from the machine snapshot."""
    torch = torch_module()
    results: list[BenchResult] = []
    if device.kind == "cpu":
        progress("memory host copy", 0.0)
        size = HOST_COPY_BYTES * 2
        src = torch.empty(size, dtype=torch.uint8)
        src.fill_(1)
        dst = torch.empty_like(src)
        seconds = _seconds(device, lambda d=dst, s=src: d.copy_(s), repeats)
        results.append(
            BenchResult.of(
                "memory",
                "host_copy",
                round(2 * size / seconds / 1e9, 2),
                "GB/s",
                note=f"{size >> 20} MiB tensor copy, read + write bytes, "
                f"{torch.get_num_threads()} threads; no DRAM peak is known for this machine",
            )
        )
        progress("memory", 1.0)
        return results
    where = device.torch_device
    progress("memory device copy", 0.0)
    src = torch.empty(DEVICE_COPY_BYTES, dtype=torch.uint8, device=where)
    src.fill_(1)
    dst = torch.empty_like(src)
    seconds = _seconds(device, lambda d=dst, s=src: d.copy_(s), repeats)
    peak = device.spec.memory_bandwidth_gbs if device.spec else None
    results.append(
        judged(
            "memory",
            "device_copy",
            round(2 * DEVICE_COPY_BYTES / seconds / 1e9, 1),
            "GB/s",
            peak,
            OK_DEVICE_PERCENT,
            "device memory bandwidth is low: check memory clocks and throttling (`dlrig monitor`)",
            f"1 GiB device-to-device copy, read + write bytes; peak {peak:g} GB/s from the "
            "GPU catalogue"
            if peak
            else "1 GiB device-to-device copy, read + write bytes",
            cause="gpu_throttling",
        )
    )
    # The link as the driver reports it; max is what it should train at.
    gen_max = gpu.pcie.gen_max if gpu else None
    width_max = gpu.pcie.width_max if gpu else None
    link_known = gen_max is not None
    if gen_max is None and device.spec is not None:
        # The card's own maximum: the slot may be slower by design, so this only informs.
        gen_max, width_max = device.spec.pcie_gen, device.spec.pcie_lanes
    link = pcie.link_gbs_per_direction(gen_max, width_max)
    link_text = f"Gen{gen_max} x{width_max}" if gen_max and width_max else "unknown link"
    device_buffer = torch.empty(HOST_COPY_BYTES, dtype=torch.uint8, device=where)
    for step, (test, pinned, to_device) in enumerate(
        (
            ("h2d_pinned", True, True),
            ("d2h_pinned", True, False),
            ("h2d_pageable", False, True),
            ("d2h_pageable", False, False),
        )
    ):
        progress(f"memory {test}", (step + 1) / 5)
        host = torch.empty(HOST_COPY_BYTES, dtype=torch.uint8, pin_memory=pinned)
        host.fill_(1)
        if to_device:
            seconds = _seconds(
                device, lambda h=host: device_buffer.copy_(h, non_blocking=True), repeats
            )
        else:
            seconds = _seconds(
                device, lambda h=host: h.copy_(device_buffer, non_blocking=True), repeats
            )
        value = round(HOST_COPY_BYTES / seconds / 1e9, 2)
        note = (
            f"256 MiB {'pinned' if pinned else 'pageable'} host memory, one way; the link is "
            f"{link_text}" + (f", {link:.1f} GB/s usable per direction" if link else "")
        )
        if pinned and not link_known:
            results.append(
                BenchResult.of(
                    "memory",
                    test,
                    value,
                    "GB/s",
                    link,
                    "info",
                    None,
                    note + " (the card's maximum: NVML did not report this slot's link)",
                )
            )
        elif pinned:
            results.append(
                judged(
                    "memory",
                    test,
                    value,
                    "GB/s",
                    link,
                    OK_PCIE_PERCENT,
                    _LINK_FIX,
                    note,
                    cause="pcie_link_degraded",
                )
            )
        else:
            # Pageable copies are slower by design; say how much pinning would gain.
            results.append(
                BenchResult.of("memory", test, value, "GB/s", link, "info", _PAGEABLE_FIX, note)
            )
    width_now = gpu.pcie.width_current if gpu is not None else None
    if width_now and width_max and width_now < width_max:
        results.append(
            BenchResult.of(
                "memory",
                "pcie_link_width",
                float(width_now),
                "lanes",
                float(width_max),
                "low",
                "the link trained at fewer lanes than it supports: reseat the card, use a "
                "full x16 slot, check risers and BIOS bifurcation",
                f"NVML: x{width_now} of x{width_max}",
                "pcie_link_degraded",
            )
        )
    progress("memory", 1.0)
    return results

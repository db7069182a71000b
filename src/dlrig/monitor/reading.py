"""What the last minute of samples means, in one line per finding.

Pure functions of samples (no hardware), so every rule is tested on recorded data. Rules look at
a window, not one sample: utilisation is a 1/6 s to 1 s average and flickers; a pattern that
holds for a good part of a minute is worth saying.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from dlrig.machine.model import Gpu
from dlrig.monitor.finding import Reading
from dlrig.monitor.sample import Sample

SEVERITY_RANK = {"critical": 0, "warn": 1, "info": 2}

IDLE_BELOW_PERCENT = 10.0
IDLE_SHARE = 0.3  # idle in at least 30% of the window while a process holds the GPU
CPU_BUSY_PERCENT = 85.0
IOWAIT_PERCENT = 20.0
THROTTLE_SHARE = 0.2
MEMORY_FULL_SHARE = 0.95
UNEVEN_PERCENT = 40.0

_THERMAL = ("sw_thermal_slowdown", "hw_thermal_slowdown")
_HARDWARE = ("hw_slowdown", "hw_power_brake_slowdown")


def _window(samples: Sequence[Sample], seconds: float) -> list[Sample]:
    if not samples:
        return []
    end = samples[-1].timestamp_unix
    return [s for s in samples if s.timestamp_unix >= end - seconds]


def _span_text(window: list[Sample]) -> str:
    span = window[-1].timestamp_unix - window[0].timestamp_unix if len(window) > 1 else 0.0
    if span >= 50:
        return "the last minute" if span < 90 else f"the last {span / 60:.0f} minutes"
    return f"the last {max(span, 1):.0f} s"


def read_situation(samples: Sequence[Sample], window_seconds: float = 60.0) -> list[Reading]:
    """Findings for the window ending at the last sample, the most severe first."""
    window = _window(samples, window_seconds)
    if not window:
        return []
    last = window[-1]
    readings: list[Reading] = []
    host_cpu = [s.host.cpu_percent for s in window if s.host is not None]
    host_iowait = [
        s.host.cpu_iowait_percent
        for s in window
        if s.host is not None and s.host.cpu_iowait_percent is not None
    ]
    cpu_mean = statistics.fmean(host_cpu) if host_cpu else None
    iowait_mean = statistics.fmean(host_iowait) if host_iowait else None
    means: dict[int, float] = {}
    for reading in last.gpus:
        index = reading.index
        if reading.status == "lost":
            readings.append(
                Reading.of(
                    "critical",
                    f"GPU {index} is lost ({reading.error}): it fell off the bus or was reset; "
                    "jobs on it have failed — check `dmesg` for Xid 79, reboot, then inspect "
                    "power and seating",
                    "gpu_fell_off_bus",
                    index,
                )
            )
            continue
        if reading.status in ("hung", "error"):
            readings.append(
                Reading.of(
                    "critical" if reading.status == "hung" else "warn",
                    f"GPU {index} does not answer: {reading.error} — the driver may be stuck; "
                    "check `dmesg` for Xid errors and `nvidia-smi` responsiveness",
                    "xid_error",
                    index,
                )
            )
            continue
        history = [g for g in (_gpu_in(s, index) for s in window) if g is not None]
        if not history:
            continue
        readings.extend(_gpu_readings(index, history, window, cpu_mean, iowait_mean))
        utils = [
            g.utilization_gpu_percent for g in history if g.utilization_gpu_percent is not None
        ]
        if utils and _holds_process(history[-1]):
            means[index] = statistics.fmean(utils)
    if len(means) >= 2:
        busiest = max(means, key=lambda i: means[i])
        idlest = min(means, key=lambda i: means[i])
        if means[busiest] - means[idlest] >= UNEVEN_PERCENT:
            readings.append(
                Reading.of(
                    "warn",
                    f"uneven load: GPU {busiest} averages {means[busiest]:.0f}% but GPU "
                    f"{idlest} {means[idlest]:.0f}% over {_span_text(window)} — ranks get "
                    "unequal work (data split, rank-0-only work, or a slower GPU)",
                    None,
                    idlest,
                )
            )
    window_start = window[0].timestamp_unix
    for xid in last.xids:
        if xid.last_seen_unix < window_start:
            continue  # an old Xid is history, not news: the report and the alerts keep it
        severity = {"critical": "critical", "warn": "warn"}.get(xid.severity, "info")
        where = f"GPU {xid.gpu_index}" if xid.gpu_index is not None else xid.pci_bus_id
        readings.append(
            Reading.of(
                severity,
                f"Xid {xid.code} ({xid.name or 'unknown code'}) on {where}, {xid.count}x — "
                "`dlrig diagnose` on the kernel log explains it",
                "gpu_fell_off_bus" if xid.code == 79 else "xid_error",
                xid.gpu_index,
            )
        )
    if not readings:
        busy = [i for i, m in means.items() if m >= 50]
        readable = [r for r in last.gpus if r.up]
        if busy and len(busy) == len(readable):
            text = f"all {len(busy)} GPU(s) busy (mean {statistics.fmean(means.values()):.0f}%)"
        elif not last.gpus:
            text = f"no GPU readings to judge in {_span_text(window)}"
        else:
            text = f"{len(readable)} GPU(s) healthy; nothing unusual in {_span_text(window)}"
        readings.append(Reading.of("info", text))
    readings.sort(key=lambda r: SEVERITY_RANK.get(r.severity, 3))
    return readings


def _gpu_in(sample: Sample, index: int) -> Gpu | None:
    for reading in sample.gpus:
        if reading.index == index and reading.up:
            return reading.gpu
    return None


def _holds_process(gpu: Gpu) -> bool:
    if gpu.processes:
        return True
    # Without a process list (MIG, containers without PID namespace access) memory in use
    # beyond a driver's few hundred MiB means something holds the GPU.
    return (gpu.memory_used_bytes or 0) > 1024**3


def _gpu_readings(
    index: int,
    history: list[Gpu],
    window: list[Sample],
    cpu_mean: float | None,
    iowait_mean: float | None,
) -> list[Reading]:
    found: list[Reading] = []
    g = history[-1]
    span = _span_text(window)
    # Idle time counts only while a process holds the GPU: the samples before a job starts (or
    # after it ends) are an empty GPU, not a waiting one. The video engines count as work.
    utils = [
        activity
        for h in history
        if _holds_process(h) and (activity := h.busiest_engine_percent) is not None
    ]
    holds = _holds_process(g)
    if utils and holds and len(utils) >= 3:
        idle_share = sum(1 for u in utils if u < IDLE_BELOW_PERCENT) / len(utils)
        if idle_share >= IDLE_SHARE and idle_share < 1.0:
            prefix = f"GPU {index} idle {idle_share:.0%} of {span}"
            if cpu_mean is not None and cpu_mean >= CPU_BUSY_PERCENT:
                found.append(
                    Reading.of(
                        "warn",
                        f"{prefix} while all CPU cores are busy ({cpu_mean:.0f}%): data "
                        "loading bound — raise DataLoader num_workers, or move decoding and "
                        "augmentation to the GPU",
                        "input_pipeline_bound",
                        index,
                    )
                )
            elif iowait_mean is not None and iowait_mean >= IOWAIT_PERCENT:
                found.append(
                    Reading.of(
                        "warn",
                        f"{prefix} while the CPUs wait on I/O ({iowait_mean:.0f}% iowait): "
                        "storage bound — put the dataset on local NVMe or pack it into large "
                        "shards",
                        "input_pipeline_bound",
                        index,
                    )
                )
            else:
                found.append(
                    Reading.of(
                        "warn",
                        f"{prefix} while a process holds it"
                        + (
                            f" and the CPUs are {cpu_mean:.0f}% busy"
                            if cpu_mean is not None
                            else ""
                        )
                        + ": the job waits between steps — a single-process DataLoader "
                        "(num_workers=0), synchronisation, communication or checkpointing; "
                        "profile one step",
                        "input_pipeline_bound",
                        index,
                    )
                )
        elif idle_share == 1.0:
            found.append(
                Reading.of(
                    "info",
                    f"GPU {index} idle for {span} although a process holds "
                    f"{(g.memory_used_bytes or 0) / 2**30:.1f} GiB — a stalled or finished job?",
                    None,
                    index,
                )
            )
    busy = [h for h in history if (h.utilization_gpu_percent or 0) >= 50]
    if busy:

        def share(names: tuple[str, ...]) -> float:
            hits = sum(1 for h in busy if set(h.clocks_event_reasons or ()) & set(names))
            return hits / len(busy)

        thermal = share(_THERMAL)
        hardware = share(_HARDWARE)
        power = share(("sw_power_cap",))
        if hardware >= THROTTLE_SHARE:
            found.append(
                Reading.of(
                    "critical",
                    f"GPU {index} in hardware slowdown {hardware:.0%} of busy time: the board "
                    "or PSU asserts slowdown — check power cables, PSU capacity and temperature",
                    "gpu_throttling",
                    index,
                )
            )
        if thermal >= THROTTLE_SHARE:
            limit = g.temperature_slowdown_c
            found.append(
                Reading.of(
                    "warn",
                    f"GPU {index} thermally throttled {thermal:.0%} of busy time at "
                    f"{g.temperature_c or 0:.0f} °C"
                    + (f" (slowdown at {limit:.0f} °C)" if limit else "")
                    + " — improve airflow and fan curve, check intakes and blanking panels",
                    "gpu_throttling",
                    index,
                )
            )
        if power >= THROTTLE_SHARE:
            limit_w, default_w = g.power_limit_watts, g.power_default_limit_watts
            if limit_w and default_w and limit_w < 0.95 * default_w:
                found.append(
                    Reading.of(
                        "warn",
                        f"GPU {index} power-capped {power:.0%} of busy time at a {limit_w:.0f} W "
                        f"limit, below its {default_w:.0f} W default — `sudo nvidia-smi -i "
                        f"{index} -pl {default_w:.0f}`",
                        "gpu_throttling",
                        index,
                    )
                )
            else:
                found.append(
                    Reading.of(
                        "info",
                        f"GPU {index} runs at its power limit {power:.0%} of busy time "
                        "(normal for heavy kernels)",
                        None,
                        index,
                    )
                )
    activities = [a for a in (h.busiest_engine_percent for h in history) if a is not None]
    working = bool(activities) and statistics.fmean(activities) >= IDLE_BELOW_PERCENT
    if g.memory_used_bytes and g.memory_total_bytes:
        used = g.memory_used_bytes / g.memory_total_bytes
        if used >= MEMORY_FULL_SHARE and not working:
            # A caching allocator (PyTorch's, JAX's preallocation) keeps what it once used:
            # full memory on an idle GPU is held, not about to overflow.
            found.append(
                Reading.of(
                    "info",
                    f"GPU {index} memory {used:.0%} held while the GPU is idle — a caching "
                    "allocator (PyTorch, JAX's preallocation) or an idle notebook keeps it; other "
                    "jobs cannot use it",
                    None,
                    index,
                )
            )
        elif used >= MEMORY_FULL_SHARE:
            found.append(
                Reading.of(
                    "warn",
                    f"GPU {index} memory {used:.0%} full — the next spike will be an out-of-"
                    "memory error; lower the batch or set "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                    "cuda_oom",
                    index,
                )
            )
    limit_w, default_w = g.power_limit_watts, g.power_default_limit_watts
    if (
        limit_w
        and default_w
        and limit_w < 0.95 * default_w
        and not any(r.cause == "gpu_throttling" and "power-capped" in r.text for r in found)
    ):
        # A lowered limit is a fact worth saying even before the GPU runs into it.
        found.append(
            Reading.of(
                "info",
                f"GPU {index} power limit {limit_w:.0f} W, below its {default_w:.0f} W default"
                f" — at full load it will run slower; restore it with `sudo nvidia-smi -i "
                f"{index} -pl {default_w:.0f}` unless the cap is on purpose",
                "gpu_throttling",
                index,
            )
        )
    link = g.pcie
    if link.width_current and link.width_max and link.width_current < link.width_max:
        found.append(
            Reading.of(
                "warn",
                f"GPU {index} PCIe link x{link.width_current} of x{link.width_max} — reseat the "
                "card or move it to a full-width slot",
                "pcie_link_degraded",
                index,
            )
        )
    elif (
        link.gen_current
        and link.gen_max
        and link.gen_current < link.gen_max
        and (g.utilization_gpu_percent or 0) >= 50
    ):
        # Idle GPUs drop to Gen1 by design; only a busy one at a low generation is a fault.
        found.append(
            Reading.of(
                "warn",
                f"GPU {index} busy at PCIe Gen{link.gen_current} of Gen{link.gen_max} — check "
                "the slot, risers and BIOS PCIe speed setting",
                "pcie_link_degraded",
                index,
            )
        )
    if g.ecc_errors.volatile_uncorrected:
        found.append(
            Reading.of(
                "critical",
                f"GPU {index} has {g.ecc_errors.volatile_uncorrected} uncorrectable ECC "
                "error(s) since the driver loaded — drain it and reset the GPU",
                "gpu_ecc_error",
                index,
            )
        )
    if g.remapped_rows.failure:
        found.append(
            Reading.of(
                "critical",
                f"GPU {index} failed to remap a memory row — it needs service (RMA)",
                "gpu_ecc_error",
                index,
            )
        )
    return found

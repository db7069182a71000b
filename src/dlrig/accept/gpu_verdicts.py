"""Burn-in verdicts about the GPUs, judged on their recorded tracks (live or replayed).

"Under load" means a reading at 50% utilisation or more: clocks, throttling and PCIe generation
mean something only while the GPU works (an idle GPU drops its link to Gen1 and its clocks on
purpose). The first 10% of the loaded time is warm-up and left out of the trends.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from dlrig.accept.series import GpuTrack, LoadTrack
from dlrig.accept.verdict import Verdict, fix_for

BUSY_PERCENT = 50.0
WARMUP_SHARE = 0.1
THROTTLE_FAIL_SHARE = 0.2  # as the monitor's reading: a pattern over a fifth of the time
POWER_CAP_SHARE = 0.9  # a limit below 90% of the default is a cap (as doctor's check)
SAG_MIN_SECONDS = 60.0  # boost clocks settle within a minute of load; shorter says nothing
SAG_FAIL = 0.10  # clocks or TFLOP/s 10% lower at the end than at the start of the load
SAG_WARN = 0.05
PEER_BELOW = 0.90  # a card under 90% of its peers' median
THERMAL = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})
HARDWARE = frozenset({"hw_slowdown", "hw_power_brake_slowdown"})


def busy(track: GpuTrack) -> list[int]:
    util = track.column("utilization_percent")
    return [
        i
        for i, status in enumerate(track.status)
        if status == "ok" and (util[i] or 0.0) >= BUSY_PERCENT
    ]


def gpu_name(track: GpuTrack) -> str:
    return f"GPU {track.index}" + (f" ({track.name})" if track.name else "")


def _values(track: GpuTrack, name: str, indices: Sequence[int]) -> list[float]:
    column = track.column(name)
    return [v for v in (column[i] for i in indices) if v is not None]


def throttle(track: GpuTrack) -> Verdict:
    vid, label = "burn_in.throttle", gpu_name(track)
    loaded = [i for i in busy(track) if track.clock_events[i] is not None]
    if not loaded:
        return Verdict.of(
            vid, "skip", f"{label}: no reading under load", "burn-in", gpu=track.index
        )
    reasons = [set(track.clock_events[i] or ()) for i in loaded]
    thermal = sum(1 for r in reasons if r & THERMAL) / len(reasons)
    hardware = sum(1 for r in reasons if r & HARDWARE) / len(reasons)
    power = sum(1 for r in reasons if "sw_power_cap" in r) / len(reasons)
    temps = _values(track, "temperature_c", loaded)
    evidence = [
        f"{len(loaded)} reading(s) under load: thermal slowdown {thermal:.0%}, hardware "
        f"slowdown {hardware:.0%}, at the power limit {power:.0%}",
    ]
    if temps:
        evidence.append(
            f"temperature up to {max(temps):.0f} °C"
            + (
                f" (slowdown at {track.temperature_slowdown_c:.0f} °C)"
                if track.temperature_slowdown_c
                else ""
            )
        )
    evidence.append(f"check: nvidia-smi -i {track.index} -q -d PERFORMANCE,TEMPERATURE")
    worst = max(thermal, hardware)
    if worst == 0:
        note = " (at its power limit part of the time: normal for matmuls)" if power else ""
        return Verdict.of(
            vid,
            "pass",
            f"{label} kept its clocks under load{note}",
            "burn-in",
            tuple(evidence),
            gpu=track.index,
        )
    kind = "hardware slowdown" if hardware >= thermal else "thermal slowdown"
    specific = (
        "check the PSU capacity and the GPU's power cables (hardware slowdown is asserted by the "
        "board)"
        if kind == "hardware slowdown"
        else "improve airflow: fan curve, intakes, blanking panels, dust"
    )
    return _throttling(
        vid,
        "fail" if worst >= THROTTLE_FAIL_SHARE else "warn",
        f"{label} throttles under sustained load: {kind} {worst:.0%} of the time",
        evidence,
        specific,
        track.index,
    )


def _throttling(
    vid: str, status: str, title: str, evidence: Sequence[str], action: str, gpu: int
) -> Verdict:
    """A burn-in finding that a GPU runs slower than it should, with the throttling fix."""
    fix = fix_for("gpu_throttling", action)
    return Verdict.of(vid, status, title, "burn-in", tuple(evidence), fix, "gpu_throttling", gpu)


def power_limit(track: GpuTrack) -> Verdict:
    vid, label = "burn_in.power_limit", gpu_name(track)
    limits = [v for v in track.column("power_limit_watts") if v is not None]
    default = track.power_default_limit_watts
    if not limits or not default:
        return Verdict.of(
            vid, "skip", f"{label}: power limit not recorded", "burn-in", gpu=track.index
        )
    limit = min(limits)
    evidence = (
        f"power limit {limit:.0f} W, default {default:.0f} W ({limit / default:.0%})",
        f"check: nvidia-smi -i {track.index} -q -d POWER",
    )
    if limit < POWER_CAP_SHARE * default:
        return _throttling(
            vid,
            "fail",
            f"{label} is power-capped at {limit:.0f} W, below its {default:.0f} W default: "
            "under sustained load it throttles",
            evidence,
            f"sudo nvidia-smi -i {track.index} -pl {default:.0f} (if the cap is deliberate, "
            "accept the lower throughput knowingly)",
            track.index,
        )
    return Verdict.of(
        vid, "pass", f"{label} power limit at its default", "burn-in", evidence, gpu=track.index
    )


def _trend(times: list[float], values: list[float]) -> tuple[float, float] | None:
    """Median of the first and of the last fifth, after the warm-up; None when too short."""
    if len(values) < 10 or times[-1] - times[0] < SAG_MIN_SECONDS:
        return None
    start = int(len(values) * WARMUP_SHARE)
    kept = values[start:]
    fifth = max(2, len(kept) // 5)
    return statistics.median(kept[:fifth]), statistics.median(kept[-fifth:])


def clock_sag(track: GpuTrack, load: LoadTrack | None, replay: bool) -> Verdict:
    vid, label = "burn_in.clock_sag", gpu_name(track)
    if replay:
        return Verdict.of(
            vid,
            "skip",
            f"{label}: a sag needs readings over time, not recorded states",
            "burn-in",
            gpu=track.index,
        )
    loaded = [i for i in busy(track) if track.column("sm_clock_mhz")[i] is not None]
    times = [track.t[i] for i in loaded]
    clocks = _values(track, "sm_clock_mhz", loaded)
    clock_trend = _trend(times, clocks) if clocks else None
    tflops_trend = None
    if load is not None:
        pairs = [(t, v) for t, v in zip(load.t, load.column("tflops"), strict=False) if v]
        if pairs:
            tflops_trend = _trend([t for t, _ in pairs], [v for _, v in pairs])
    if clock_trend is None and tflops_trend is None:
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        return Verdict.of(
            vid,
            "skip",
            f"{label}: {span:.0f} s under load is too short to judge a sag "
            f"(needs {SAG_MIN_SECONDS:.0f} s)",
            "burn-in",
            gpu=track.index,
        )
    evidence = []
    drops = []
    if clock_trend is not None:
        first, last = clock_trend
        drops.append(1 - last / first if first else 0.0)
        evidence.append(
            f"SM clock under load {first:.0f} MHz at the start, {last:.0f} MHz at the end"
        )
    if tflops_trend is not None:
        first, last = tflops_trend
        drops.append(1 - last / first if first else 0.0)
        evidence.append(f"matmul {first:.1f} TFLOP/s at the start, {last:.1f} TFLOP/s at the end")
    temps = _values(track, "temperature_c", loaded)
    if temps:
        evidence.append(f"temperature {temps[0]:.0f} °C → {temps[-1]:.0f} °C")
    drop = max(drops)
    if drop >= SAG_WARN:
        return _throttling(
            vid,
            "fail" if drop >= SAG_FAIL else "warn",
            f"{label} slows down over the burn-in: {drop:.0%} lower at the end",
            evidence,
            "the GPU heats up and lowers its clocks: check the cooling",
            track.index,
        )
    return Verdict.of(
        vid,
        "pass",
        f"{label} held its speed over the burn-in",
        "burn-in",
        tuple(evidence),
        gpu=track.index,
    )


def peers(tracks: Sequence[GpuTrack], loads_by_gpu: dict[int, LoadTrack]) -> list[Verdict]:
    """A card below its peers: same model, under 90% of the group's median TFLOP/s (live) or
    SM clock under load (when no TFLOP/s were measured)."""
    groups: dict[str, list[GpuTrack]] = {}
    for track in tracks:
        groups.setdefault(track.name or "?", []).append(track)
    verdicts = []
    for name, group in groups.items():
        if len(group) < 2:
            continue
        figures: dict[int, float] = {}
        unit = "TFLOP/s"
        for track in group:
            load = loads_by_gpu.get(track.index)
            values = [v for v in (load.column("tflops") if load else []) if v]
            if values:
                figures[track.index] = statistics.median(values[int(len(values) * WARMUP_SHARE) :])
        if len(figures) < len(group):
            unit, figures = "MHz", {}
            for track in group:
                clocks = _values(track, "sm_clock_mhz", busy(track))
                if clocks:
                    figures[track.index] = statistics.median(clocks)
        if len(figures) < 2:
            continue
        median = statistics.median(figures.values())
        slow = sorted((v / median, i) for i, v in figures.items() if v < PEER_BELOW * median)
        evidence = tuple(f"GPU {i}: {v:.1f} {unit}" for i, v in sorted(figures.items()))
        if slow:
            share, index = slow[0]
            verdicts.append(
                _throttling(
                    "burn_in.peers",
                    "fail",
                    f"GPU {index} ({name}) reaches {share:.0%} of its peers' median under the "
                    "same load",
                    evidence,
                    f"compare GPU {index}'s clocks, power and temperature with the others "
                    "(`dlrig monitor`); reseat or swap it; if it stays slow, RMA it",
                    index,
                )
            )
        else:
            verdicts.append(
                Verdict.of(
                    "burn_in.peers",
                    "pass",
                    f"{len(figures)} × {name} within {1 - PEER_BELOW:.0%} of each other",
                    "burn-in",
                    evidence,
                )
            )
    return verdicts


def pcie(track: GpuTrack, replay: bool) -> Verdict:
    vid, label = "burn_in.pcie", gpu_name(track)
    ok = [i for i, s in enumerate(track.status) if s == "ok"]
    widths = _values(track, "pcie_width", ok)
    check = (
        f"check: nvidia-smi -i {track.index} --query-gpu=pcie.link.gen.current,pcie.link.gen.max,"
        "pcie.link.width.current,pcie.link.width.max --format=csv"
    )
    if not widths:
        return Verdict.of(
            vid, "skip", f"{label}: PCIe link not recorded", "burn-in", gpu=track.index
        )
    problems = []
    wmax = track.pcie_width_max
    if wmax and min(widths) < wmax:
        problems.append(f"link at x{min(widths):.0f} of x{wmax}")
    loaded = busy(track)
    gens = _values(track, "pcie_gen", loaded)
    gmax = track.pcie_gen_max
    if gmax and gens and min(gens) < gmax:
        problems.append(f"Gen{min(gens):.0f} of Gen{gmax} under load")
    links = {
        (track.column("pcie_gen")[i], track.column("pcie_width")[i])
        for i in loaded
        if track.column("pcie_width")[i] is not None
    }
    if len(links) > 1 and not replay:
        shown = ", ".join(f"Gen{g:.0f} x{w:.0f}" for g, w in sorted(links, key=str) if g and w)
        problems.append(f"the link retrained under load ({shown})")
    replays = [v for v in track.column("pcie_replays") if v is not None]
    new_replays = replays[-1] - replays[0] if len(replays) > 1 and not replay else 0.0
    evidence = (
        tuple(problems)
        + ((f"{new_replays:.0f} PCIe replay(s) during the burn-in",) if new_replays else ())
        + (check,)
    )
    if problems:
        return Verdict.of(
            vid,
            "fail",
            f"{label} PCIe: " + "; ".join(problems),
            "burn-in",
            evidence,
            fix_for(
                "pcie_link_degraded",
                "reseat the card in a full-width slot wired to the CPU, remove risers, check the "
                "BIOS PCIe settings",
            ),
            "pcie_link_degraded",
            track.index,
        )
    if new_replays:
        return Verdict.of(
            vid,
            "warn",
            f"{label}: {new_replays:.0f} PCIe replay(s) during the burn-in",
            "burn-in",
            evidence,
            fix_for(
                "pcie_link_degraded",
                "replays mean bit errors on the link: reseat the card, check risers",
            ),
            "pcie_link_degraded",
            track.index,
        )
    link = f"x{max(widths):.0f}" + (f", Gen{max(gens):.0f} under load" if gens else "")
    return Verdict.of(
        vid, "pass", f"{label} PCIe link steady at {link}", "burn-in", evidence, gpu=track.index
    )

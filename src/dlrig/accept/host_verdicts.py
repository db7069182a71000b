"""Burn-in verdicts about the host (CPU, memory, disk) and about the load itself.

Host throughput that falls over the burn-in is a warning, not a failure: on a shared or
virtual host other tenants take cycles too, so a sag there is evidence to look at, while a
disk that returns other bytes than were written is a failure wherever it happens.
"""

from __future__ import annotations

import errno
import statistics
from collections.abc import Sequence

from dlrig.accept.gpu_verdicts import SAG_MIN_SECONDS, WARMUP_SHARE
from dlrig.accept.loads import Absent
from dlrig.accept.series import LoadTrack
from dlrig.accept.verdict import Verdict, fix_for

HOST_SAG_WARN = 0.15

_WHAT = {
    "cpu": ("CPU", "hash_mb_s", "MB/s SHA-256"),
    "memory": ("host memory", "copy_gb_s", "GB/s copied"),
}


def absent(items: Sequence[Absent]) -> list[Verdict]:
    return [
        Verdict.of(
            f"burn_in.{a.part.replace(' ', '_')}", "skip", f"{a.part}: {a.reason}", "burn-in"
        )
        for a in items
    ]


def _sag(track: LoadTrack, metric: str) -> tuple[float, float] | None:
    pairs = [(t, v) for t, v in zip(track.t, track.column(metric), strict=False) if v]
    if len(pairs) < 10 or pairs[-1][0] - pairs[0][0] < SAG_MIN_SECONDS:
        return None
    kept = [v for _, v in pairs[int(len(pairs) * WARMUP_SHARE) :]]
    fifth = max(2, len(kept) // 5)
    return statistics.median(kept[:fifth]), statistics.median(kept[-fifth:])


def _median(track: LoadTrack, metric: str) -> float | None:
    values = [v for v in track.column(metric) if v]
    return statistics.median(values) if values else None


def host_load(track: LoadTrack) -> Verdict:
    name, metric, unit = _WHAT[track.kind]
    vid = f"burn_in.{track.kind}"
    if track.error:
        return Verdict.of(vid, "warn", f"{name} load stopped: {track.error}", "burn-in")
    median = _median(track, metric)
    if median is None:
        return Verdict.of(vid, "skip", f"{name} load reported nothing (too short?)", "burn-in")
    workers = f" on {track.workers} core(s)" if track.kind == "cpu" else ""
    evidence = [f"median {median:.1f} {unit}{workers} over {len(track.t)} interval(s)"]
    trend = _sag(track, metric)
    if trend is not None:
        first, last = trend
        evidence.append(f"{first:.1f} at the start, {last:.1f} at the end")
        drop = 1 - last / first if first else 0.0
        if drop >= HOST_SAG_WARN:
            return Verdict.of(
                vid,
                "warn",
                f"{name} throughput fell {drop:.0%} over the burn-in",
                "burn-in",
                (*evidence, "on a shared or virtual host other tenants take cycles too"),
                "check the CPU's cooling and power settings (`cpupower frequency-info`, BIOS "
                "power profile) and what else ran on the host",
            )
    return Verdict.of(vid, "pass", f"{name} sustained the load", "burn-in", tuple(evidence))


def disk_load(track: LoadTrack) -> Verdict:
    vid = "burn_in.disk"
    where = track.detail.get("file")
    mismatched = sum(v or 0.0 for v in track.column("mismatched_chunks"))
    if mismatched:
        return Verdict.of(
            vid,
            "fail",
            f"the disk returned other data than was written ({mismatched:.0f} chunk(s) of 16 MiB)",
            "burn-in",
            (f"file {where}", "check: sudo dmesg -T | grep -iE 'i/o error|nvme|ata'"),
            "check the disk's health (`sudo smartctl -a`, `sudo nvme smart-log`), its cable or "
            "slot, and the filesystem; replace the disk if it repeats",
        )
    if track.error:
        full = track.detail.get("errno") == errno.ENOSPC
        return Verdict.of(
            vid,
            "fail",
            f"the disk load failed: {track.error}",
            "burn-in",
            (f"file {where}",),
            fix_for("disk_full") if full else "check the disk and the filesystem (`dmesg`)",
            "disk_full" if full else None,
        )
    write, read = _median(track, "write_mb_s"), _median(track, "read_mb_s")
    if write is None and read is None:
        return Verdict.of(vid, "skip", "the disk load reported nothing (too short?)", "burn-in")
    figures = []
    if write is not None:
        figures.append(f"writes with fsync {write:.0f} MB/s")
    if read is not None:
        figures.append(f"reads {read:.0f} MB/s")
    evidence = (", ".join(figures) + " (medians)", f"file {where}, every byte read back checked")
    return Verdict.of(
        vid,
        "pass",
        "the disk sustained the load and returned what was written",
        "burn-in",
        evidence,
    )


def gpu_load(track: LoadTrack) -> Verdict | None:
    """A GPU that could not be loaded: its verdicts under load are then not judged."""
    if not track.error:
        return None
    return Verdict.of(
        "burn_in.gpu_load",
        "warn",
        f"GPU {track.subject} could not be loaded: {track.error}",
        "burn-in",
        ("without load, throttling, clock sag and peers are not judged for it",),
        "run `dlrig doctor`: torch must be a CUDA build that sees this GPU",
        None,
        track.subject,
    )

"""Mounted filesystems that can hold data, with their media (NVMe / SSD / HDD / network)."""

from __future__ import annotations

import os
from pathlib import Path

from dlrig.machine.model import Mount
from dlrig.machine.runner import ProbeContext

_LOCAL_FS = {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "f2fs", "jfs", "reiserfs", "bcachefs"}
_NETWORK_FS = {
    "nfs",
    "nfs4",
    "cifs",
    "smb3",
    "lustre",
    "gpfs",
    "beegfs",
    "glusterfs",
    "cephfs",
    "ceph",
}
_SKIP_PREFIXES = (
    "/boot",
    "/snap/",
    "/var/lib/docker/",
    "/var/lib/containers/",
    "/run/",
    "/proc",
    "/sys",
)


def _unescape(field: str) -> str:
    # /proc/mounts escapes spaces and tabs as octal.
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")


def _block_dir(ctx: ProbeContext, mountpoint: str) -> Path | None:
    """The /sys/block entry of the disk under a mountpoint (partitions resolved to the disk)."""
    try:
        dev = os.stat(ctx.path(mountpoint)).st_dev
    except OSError:
        return None
    major, minor = os.major(dev), os.minor(dev)
    if major == 0:
        return None  # anonymous device: overlay, tmpfs, network filesystems
    link = ctx.path(f"/sys/dev/block/{major}:{minor}")
    try:
        resolved = link.resolve(strict=True)
    except OSError:
        return None
    if (resolved / "partition").exists():
        resolved = resolved.parent
    return resolved


def _is_rotational(block: Path) -> bool | None:
    slaves = sorted((block / "slaves").glob("*")) if (block / "slaves").is_dir() else []
    if slaves:
        # device-mapper / md: rotational if any member disk is
        states = [_is_rotational(slave.resolve()) for slave in slaves]
        known = [s for s in states if s is not None]
        return any(known) if known else None
    try:
        return (block / "queue" / "rotational").read_text().strip() == "1"
    except OSError:
        return None


def _media(ctx: ProbeContext, mountpoint: str, fstype: str) -> tuple[str, bool | None]:
    if fstype in _NETWORK_FS or fstype.startswith("fuse."):
        return "network", None
    if fstype in {"tmpfs", "ramfs"}:
        return "memory", False
    block = _block_dir(ctx, mountpoint)
    if block is None:
        return "unknown", None
    rotational = _is_rotational(block)
    if block.name.startswith("nvme"):
        return "nvme", False
    if block.name.startswith(("vd", "xvd")):
        # virtio/Xen disks report rotational=1 whatever backs them: the media is unknown.
        return "virtual", rotational
    if rotational is None:
        return "unknown", None
    return ("hdd" if rotational else "ssd"), rotational


def _usage(ctx: ProbeContext, mountpoint: str) -> tuple[int | None, int | None]:
    try:
        stats = os.statvfs(ctx.path(mountpoint))
    except OSError:
        return None, None
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


def mounts(ctx: ProbeContext) -> tuple[Mount, ...]:
    table = ctx.read("/proc/self/mounts") or ctx.read("/proc/mounts") or ""
    wanted: dict[str, Mount] = {}
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        device, mountpoint, fstype = _unescape(fields[0]), _unescape(fields[1]), fields[2]
        is_root = mountpoint == "/"
        if not is_root and mountpoint.startswith(_SKIP_PREFIXES):
            continue
        if not (
            is_root or fstype in _LOCAL_FS or fstype in _NETWORK_FS or fstype.startswith("fuse.")
        ):
            continue
        if fstype.startswith("fuse.") and fstype in {
            "fuse.portal",
            "fuse.gvfsd-fuse",
            "fuse.lxcfs",
        }:
            continue
        media, rotational = _media(ctx, mountpoint, fstype)
        total, free = _usage(ctx, mountpoint)
        # The last entry for a mountpoint is the one in effect (later mounts shadow earlier).
        wanted[mountpoint] = Mount(
            mountpoint=mountpoint,
            device=device,
            fstype=fstype,
            media=media,
            total_bytes=total,
            free_bytes=free,
            rotational=rotational,
        )
    return tuple(sorted(wanted.values(), key=lambda m: m.mountpoint))


def mount_for(path: str, all_mounts: tuple[Mount, ...]) -> Mount | None:
    """The mount holding `path` (longest matching mountpoint)."""
    absolute = os.path.abspath(path)
    best = None
    for mount in all_mounts:
        prefix = mount.mountpoint.rstrip("/") + "/"
        if (
            absolute == mount.mountpoint or absolute.startswith(prefix) or mount.mountpoint == "/"
        ) and (best is None or len(mount.mountpoint) > len(best.mountpoint)):
            best = mount
    return best


def filesystem_type(path: str, ctx: ProbeContext | None = None) -> str | None:
    """The filesystem type ("ext4", "tmpfs", "nfs4", ...) that holds `path`, or None."""
    ctx = ctx or ProbeContext()
    table = ctx.read("/proc/self/mounts") or ctx.read("/proc/mounts") or ""
    absolute = os.path.realpath(path)
    best: tuple[int, str] | None = None
    for line in table.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mountpoint = _unescape(fields[1])
        prefix = mountpoint.rstrip("/") + "/"
        holds = absolute == mountpoint or absolute.startswith(prefix) or mountpoint == "/"
        # Later entries for the same or a longer mountpoint shadow earlier ones.
        if holds and (best is None or len(mountpoint) >= best[0]):
            best = (len(mountpoint), fields[2])
    return best[1] if best else None

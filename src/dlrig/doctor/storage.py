"""Storage checks: datasets on spinning disks, filesystems close to full."""

from __future__ import annotations

from dlrig.doctor.registry import Check, DoctorOptions, check
from dlrig.machine.model import Machine, Mount
from dlrig.machine.storage import mount_for
from dlrig.report import CheckResult
from dlrig.units import human_bytes


def _data_mounts(m: Machine, o: DoctorOptions) -> list[Mount]:
    """Mounts that hold data: the ones the user named, else every real filesystem."""
    mounts = m.mounts or ()
    if o.data_paths:
        chosen = [mount_for(path, mounts) for path in o.data_paths]
        return [mount for mount in chosen if mount is not None]
    return [mount for mount in mounts if mount.media != "memory"]


@check("storage.rotational", "data is not on a spinning disk")
def rotational(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """A hard disk reads about 150–250 MB/s sequentially and far less at random; an image
    training pipeline on one GPU wants about 1 GB/s of random reads. Datasets belong on NVMe or
    SSD (or in page cache)."""
    if m.mounts is None:
        return c.skip("mounts not in this snapshot")
    mounts = _data_mounts(m, o)
    spinning = [mount for mount in mounts if mount.media == "hdd"]
    if spinning:
        return c.warn(
            f"{len(spinning)} data filesystem(s) on spinning disks",
            *(f"{mount.mountpoint} ({mount.device}, {mount.fstype}): HDD" for mount in spinning),
            "check: lsblk -d -o NAME,ROTA,SIZE,MODEL",
            fix="Copy the active dataset to NVMe/SSD (or /dev/shm if it fits), or pack it into large "
            "sequential shards (WebDataset, MDS); measure with `dlrig bench storage --path DIR`.",
        )
    if not mounts:
        return c.skip("no data filesystem found")
    return c.ok(
        "no data filesystem on a spinning disk",
        *(f"{mount.mountpoint}: {mount.media}" for mount in mounts),
    )


@check("storage.free_space", "filesystems have free space", cause="disk_full")
def free_space(c: Check, m: Machine, o: DoctorOptions) -> CheckResult:
    """Checkpoints of large models take tens to hundreds of GB each, and caches (~/.cache/
    huggingface, /tmp, torch.compile) grow silently; a full disk kills a run at its save."""
    if m.mounts is None:
        return c.skip("mounts not in this snapshot")
    low = []
    critical = []
    for mount in _data_mounts(m, o):
        if mount.free_bytes is None or not mount.total_bytes:
            continue
        fraction = mount.free_bytes / mount.total_bytes
        if fraction < 0.01 or mount.free_bytes < 1024**3:
            critical.append(mount)
        elif fraction < o.min_free_disk_fraction or mount.free_bytes < o.min_free_disk_bytes:
            low.append(mount)
    describe = [
        f"{mount.mountpoint}: {human_bytes(mount.free_bytes)} free of {human_bytes(mount.total_bytes)}"
        for mount in critical + low
    ]
    fix = (
        "Free space: `du -xh --max-depth=2 <mount> | sort -h | tail`, prune old checkpoints "
        "(save_total_limit), `huggingface-cli delete-cache`, or move caches with HF_HOME/TMPDIR."
    )
    if critical:
        return c.fail(f"{len(critical)} filesystem(s) almost full", *describe, fix=fix)
    if low:
        return c.warn(f"{len(low)} filesystem(s) low on space", *describe, fix=fix)
    return c.ok("filesystems have free space")

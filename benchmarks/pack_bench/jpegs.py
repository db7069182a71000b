"""The data set: N real JPEGs made with Pillow, ImageNet-like in size and in being
photograph-like to a JPEG encoder (smooth colour fields with grain), in 100 class folders."""

from __future__ import annotations

import multiprocessing
import shutil
from pathlib import Path


def _make_images(job: tuple[str, int, int]) -> int:
    """A smooth colour field (a few random pixels upsampled) with grain on top (a window of
    one noise tile per process), 160-500 px a side, quality 70-95."""
    import numpy as np
    from PIL import Image

    root, start, stop = job
    total = 0
    tile = np.random.default_rng(start).integers(0, 256, (1024, 1024, 3), np.uint8)
    for number in range(start, stop):
        rng = np.random.default_rng(number)
        width = int(rng.integers(160, 501))
        height = int(np.clip(width * rng.uniform(0.6, 1.4), 120, 500))
        cells = rng.integers(
            0, 256, (int(rng.integers(3, 12)), int(rng.integers(3, 12)), 3), np.uint8
        )
        field = Image.fromarray(cells).resize((width, height), Image.Resampling.BILINEAR)
        x, y = (int(v) for v in rng.integers(0, 1024 - 500, 2))
        grain = Image.fromarray(tile[y : y + height, x : x + width])
        image = Image.blend(field, grain, float(rng.uniform(0.1, 0.4)))
        folder = Path(root) / f"n{number % 100:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"img_{number:06d}.jpg"
        image.save(path, format="JPEG", quality=int(rng.integers(70, 96)))
        total += path.stat().st_size
    return total


def make_dataset(root: Path, samples: int, jobs: int) -> None:
    """Make the set once; a `.complete` stamp with the count lets later runs reuse it."""
    stamp = root / ".complete"
    if stamp.exists() and stamp.read_text() == str(samples):
        return
    shutil.rmtree(root, ignore_errors=True)
    step = -(-samples // (jobs * 8))
    parts = [(str(root), s, min(samples, s + step)) for s in range(0, samples, step)]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        pool.map(_make_images, parts)
    stamp.write_text(str(samples))


def jpeg_paths(root: Path) -> list[Path]:
    return sorted(root.rglob("*.jpg"))

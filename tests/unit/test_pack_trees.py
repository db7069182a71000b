"""Real JPEG trees for the pack tests (made with Pillow: real encoder output, varied sizes).

`make_tree` is imported by the other pack tests; the test here checks what it makes.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image


def jpeg_bytes(rng: np.random.Generator, width: int, height: int, quality: int = 85) -> bytes:
    ys, xs = np.mgrid[0:height, 0:width]
    base = np.stack(
        [(xs * rng.uniform(0.5, 3) + ys * rng.uniform(0.5, 3) + rng.uniform(0, 255)) % 256] * 3,
        axis=-1,
    )
    noisy = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noisy).save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()


def make_tree(
    root: Path, classes: int = 3, per_class: int = 40, seed: int = 0, big: int = 0
) -> list[Path]:
    """root/class_k/img_nnn.jpg, sizes 24-96 px a side (plus `big` 320 px images in the last
    class); returns the files in listing order."""
    rng = np.random.default_rng(seed)
    files = []
    for number in range(classes):
        folder = root / f"class_{number}"
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(per_class):
            width, height = (int(v) for v in rng.integers(24, 96, 2))
            path = folder / f"img_{index:03d}.jpg"
            path.write_bytes(jpeg_bytes(rng, width, height))
            files.append(path)
    for index in range(big):
        path = root / f"class_{classes - 1}" / f"zz_big_{index}.jpg"
        path.write_bytes(jpeg_bytes(rng, 320, 320, quality=95))
        files.append(path)
    return files


def test_make_tree_writes_real_jpegs_of_varied_size(tmp_path: Path) -> None:
    files = make_tree(tmp_path, classes=2, per_class=5)
    sizes = {p.stat().st_size for p in files}
    assert len(files) == 10 and len(sizes) > 5
    for path in files:
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.convert("RGB").size[0] >= 24

"""A synthetic ImageNet-like dataset: the default workload of `dlrig bench dataloader`."""

from __future__ import annotations

import io
import random
from typing import Any

from dlrig.bench.device import torch_module
from dlrig.errors import MissingExtraError


class SyntheticImages:
    """ImageNet-like samples: JPEG bytes decoded, randomly cropped, resized and flipped.

    The decode-and-augment cost per sample is what makes real image pipelines CPU-bound; the
    images themselves are generated once (smooth gradients with noise, 500×375, quality 90,
    ~50-100 KB like ImageNet's), so no dataset needs to be downloaded.
    """

    def __init__(self, length: int = 100_000, size: int = 224, distinct: int = 32) -> None:
        try:
            import numpy as np
            from PIL import Image
        except ImportError:
            raise MissingExtraError("pillow", "torch", "the synthetic image dataset") from None
        rng = np.random.default_rng(0)
        self.length = length
        self.size = size
        self.images: list[bytes] = []
        ys, xs = np.mgrid[0:375, 0:500]
        for _ in range(distinct):
            base = np.stack(
                [
                    (xs * rng.uniform(0.2, 0.6) + ys * rng.uniform(0.2, 0.6) + rng.uniform(0, 255))
                    % 256
                    for _ in range(3)
                ],
                axis=-1,
            )
            noisy = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
            buffer = io.BytesIO()
            Image.fromarray(noisy).save(buffer, format="JPEG", quality=90)
            self.images.append(buffer.getvalue())

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[Any, int]:
        import numpy as np
        from PIL import Image

        torch = torch_module()
        rng = random.Random(index)
        with Image.open(io.BytesIO(self.images[index % len(self.images)])) as encoded:
            picture = encoded.convert("RGB")
        width, height = picture.size
        scale = rng.uniform(0.35, 1.0)
        crop_w, crop_h = int(width * scale), int(height * scale)
        left, top = rng.randrange(width - crop_w + 1), rng.randrange(height - crop_h + 1)
        picture = picture.crop((left, top, left + crop_w, top + crop_h))
        picture = picture.resize((self.size, self.size), Image.Resampling.BILINEAR)
        if rng.random() < 0.5:
            picture = picture.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        array = np.asarray(picture, dtype=np.float32) / 255.0
        tensor = torch.from_numpy(array).permute(2, 0, 1).contiguous()
        return tensor, index % 1000

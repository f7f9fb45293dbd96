"""Small real-photo images for the external-benchmark fixtures: a source crop and edits of graded quality.

Every edit is a deterministic operation on a scikit-image photo (no download); ``quality`` (0..1) sets how strongly
it is degraded, so a fixture can plant a human preference that a sensible scorer could in principle recover.
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageFilter

from .photos import SCENES, add_noise, colour_cast, photo_pool, scene_crop

__all__ = ["edited_version", "jpeg_bytes", "source_photo"]


def source_photo(index: int, size: int = 48) -> Image.Image:
    """A square crop of the ``index``-th scene photo (deterministic)."""
    rng = np.random.default_rng(1000 + index)
    name = SCENES[index % len(SCENES)]
    return scene_crop(photo_pool()[name], rng, size)


def edited_version(source: Image.Image, quality: float, seed: int) -> Image.Image:
    """The source with a tint (the "edit") and degradations that grow as ``quality`` falls."""
    rng = np.random.default_rng(seed)
    severity = float(np.clip(1.0 - quality, 0.0, 1.0))
    image = colour_cast(source, 0.15 + 0.5 * severity, rng)
    if severity > 0.3:
        image = image.filter(ImageFilter.GaussianBlur(0.5 + 2.0 * severity))
    return add_noise(image, 3.0 + 25.0 * severity, rng)


def jpeg_bytes(image: Image.Image, quality: int = 90) -> bytes:
    """The image encoded as JPEG (what the releases embed or store)."""
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=quality)
    return buffer.getvalue()

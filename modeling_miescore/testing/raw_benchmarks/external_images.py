"""Small real-photo images for the external-benchmark fixtures: a source crop and edits of graded quality.

Every edit is a deterministic operation on a scikit-image photo (no download); ``quality`` (0..1) sets how strongly
it is degraded, so a fixture can plant a human preference that a sensible scorer could in principle recover.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageFilter

from .photos import SCENES, add_noise, colour_cast, photo_pool, scene_crop

__all__ = ["edited_version", "source_photo", "write_parquet"]


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


def write_parquet(path: Path, rows: list[dict], features) -> None:
    """One Parquet shard with the ``datasets`` features in its schema metadata (as ``push_to_hub`` writes them)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=features.arrow_schema), path)

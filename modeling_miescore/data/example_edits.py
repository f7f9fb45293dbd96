"""Multi-source editing examples made in code from real photos shipped with scikit-image.

The photos (coffee, chelsea the cat, astronaut, rocket, camera) are public domain / CC0 per scikit-image's
documentation. Edits are composed with soft masks so that the examples look like real editing outputs, and
one example is a deliberately failed edit. ``miescore demo``, ``miescore doctor`` and the Space use them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter


def load_photo(name: str) -> Image.Image:
    try:
        from skimage import data
    except ImportError as err:  # pragma: no cover - exercised only without the dev extra
        raise RuntimeError("the bundled examples need scikit-image: pip install 'miescore[dev]'") from err
    array = getattr(data, name)()
    image = Image.fromarray(array)
    return image.convert("RGB")


def fit_within(image: Image.Image, max_side: int) -> Image.Image:
    scale = max_side / max(image.size)
    if scale >= 1:
        return image
    return image.resize((max(1, round(image.width * scale)), max(1, round(image.height * scale))), Image.LANCZOS)


def _soft_ellipse(size: tuple[int, int], feather: float) -> Image.Image:
    mask = Image.new("L", size, 0)
    w, h = size
    ImageDraw.Draw(mask).ellipse((w * 0.08, h * 0.06, w * 0.92, h * 0.94), fill=255)
    return mask.filter(ImageFilter.GaussianBlur(feather)) if feather > 0 else mask


def compose(scene: Image.Image, subject: Image.Image, box: tuple[float, float, float, float],
            crop: tuple[float, float, float, float] = (0, 0, 1, 1), feather: float = 4.0) -> Image.Image:
    """Paste ``subject`` (its relative ``crop``) into ``scene`` at the relative ``box`` with a soft elliptic mask.

    ``feather=0`` pastes with a hard edge (a typical 'pasted without blending' fault).
    """
    sw, sh = subject.size
    piece = subject.crop((round(crop[0] * sw), round(crop[1] * sh), round(crop[2] * sw), round(crop[3] * sh)))
    W, H = scene.size
    x0, y0, x1, y1 = round(box[0] * W), round(box[1] * H), round(box[2] * W), round(box[3] * H)
    piece = piece.resize((max(1, x1 - x0), max(1, y1 - y0)), Image.LANCZOS)
    out = scene.copy()
    out.paste(piece, (x0, y0), _soft_ellipse(piece.size, feather))
    return out


def tint(image: Image.Image, rgb: tuple[float, float, float]) -> Image.Image:
    """Multiply each channel (a crude palette transfer / colour shift)."""
    array = np.asarray(image, dtype=np.float32) * np.asarray(rgb, dtype=np.float32)
    return Image.fromarray(np.clip(array, 0, 255).astype(np.uint8))


def example_edits(max_side: int = 256) -> list[dict]:
    """A few multi-source edits: dicts with ``id, task, instruction, sources (PIL list), edited (PIL), note``.

    ``max_side`` bounds the longer side of every image (the photos are 300-640 px).
    """
    coffee, cat, astronaut, rocket = (fit_within(load_photo(n), max_side)
                                      for n in ("coffee", "chelsea", "astronaut", "rocket"))
    camera = fit_within(load_photo("camera"), max_side)

    cat_on_table = compose(coffee, cat, (0.55, 0.35, 0.95, 0.95), crop=(0.25, 0.0, 0.85, 1.0))
    astronaut_at_launch = compose(rocket, astronaut, (0.05, 0.45, 0.45, 0.98), crop=(0.25, 0.0, 0.75, 0.6))
    both_at_table = compose(cat_on_table, astronaut, (0.02, 0.30, 0.42, 0.95), crop=(0.25, 0.0, 0.75, 0.6))
    failed = coffee.filter(ImageFilter.GaussianBlur(3))  # cat missing and the scene blurred
    sepia_camera = tint(camera, (1.10, 0.90, 0.65))

    return [
        {"id": "cat-coffee", "task": "object_composition", "sources": [coffee, cat], "edited": cat_on_table,
         "instruction": "Place the cat from image 2 on the table next to the coffee cup in image 1.",
         "note": "a reasonable composition"},
        {"id": "astronaut-rocket", "task": "character_composition", "sources": [rocket, astronaut],
         "edited": astronaut_at_launch,
         "instruction": "Put the astronaut from image 2 in front of the rocket launch in image 1.",
         "note": "a reasonable composition"},
        {"id": "cat-astronaut-coffee", "task": "interaction", "sources": [coffee, cat, astronaut],
         "edited": both_at_table,
         "instruction": "Seat the cat from image 2 and the astronaut from image 3 at the coffee table of image 1.",
         "note": "three sources"},
        {"id": "cat-coffee-failed", "task": "object_composition", "sources": [coffee, cat], "edited": failed,
         "instruction": "Place the cat from image 2 on the table next to the coffee cup in image 1.",
         "note": "a failed edit: the cat is missing and the image is blurred"},
        {"id": "camera-palette", "task": "style_transfer", "sources": [camera, coffee], "edited": sepia_camera,
         "instruction": "Recolour the photo in image 1 with the warm palette of image 2.",
         "note": "a global colour edit"},
    ]


def save_example_files(examples: list[dict], folder, relative: bool = False) -> list[dict]:
    """Write each example's images as PNG into ``folder``; return ``{"sources", "edited", "instruction"}``
    records with the file paths (names only with ``relative=True``, for JSONL inputs beside the images)."""
    folder = Path(folder)
    records = []
    for example in examples:
        paths = []
        for k, image in enumerate([*example["sources"], example["edited"]]):
            path = folder / f"{example['id']}-{k}.png"
            if not path.exists():
                image.save(path)
            paths.append(path.name if relative else str(path))
        records.append({"sources": paths[:-1], "edited": paths[-1], "instruction": example["instruction"]})
    return records

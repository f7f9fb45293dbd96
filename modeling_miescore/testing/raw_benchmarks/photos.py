"""Real photos for the synthetic raw benchmarks, and the image operations that turn them into sources and edits.

The photos ship with scikit-image and load offline (no pooch download); every random choice comes from the
``numpy.random.Generator`` passed in, so the fixtures are deterministic.
"""

from __future__ import annotations

import io
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

__all__ = ["COLOURS", "OBJECTS", "PHOTOS", "SCENES", "WORDS", "add_noise", "colour_cast", "colour_transfer", "crop_box",
           "image_bytes", "jpeg_roundtrip", "paste", "photo_pool", "save_jpeg", "scene_crop", "text_card"]

# Photos that ship with scikit-image and load offline (no pooch download).
# name -> (loader, salient object box as fractions (x0, y0, x1, y1), object noun)
PHOTOS = {
    "astronaut": ("astronaut", (0.25, 0.02, 0.80, 0.62), "astronaut"),
    "coffee": ("coffee", (0.15, 0.05, 0.85, 0.95), "coffee cup"),
    "chelsea": ("chelsea", (0.22, 0.02, 0.78, 0.98), "cat"),
    "rocket": ("rocket", (0.36, 0.00, 0.66, 0.92), "rocket"),
    "camera": ("camera", (0.20, 0.05, 0.72, 0.95), "photographer"),
    "clock": ("clock", (0.12, 0.05, 0.88, 0.95), "clock"),
    "coins": ("coins", (0.05, 0.05, 0.95, 0.95), "coins"),
    "colorwheel": ("colorwheel", (0.05, 0.05, 0.95, 0.95), "colour wheel"),
    "motorcycle": ("stereo_motorcycle", (0.10, 0.15, 0.90, 0.92), "motorcycle"),
    "logo": ("logo", (0.05, 0.05, 0.95, 0.95), "logo"),
    "tissue": ("immunohistochemistry", (0.0, 0.0, 1.0, 1.0), "tissue sample"),
    "hubble": ("hubble_deep_field", (0.0, 0.0, 1.0, 1.0), "galaxy field"),
    "brick": ("brick", (0.0, 0.0, 1.0, 1.0), "brick wall"),
    "grass": ("grass", (0.0, 0.0, 1.0, 1.0), "lawn"),
    "gravel": ("gravel", (0.0, 0.0, 1.0, 1.0), "gravel path"),
    "moon": ("moon", (0.0, 0.0, 1.0, 1.0), "moon surface"),
    "retina": ("retina", (0.1, 0.1, 0.9, 0.9), "retina scan"),
    "page": ("page", (0.0, 0.0, 1.0, 1.0), "printed page"),
}
OBJECTS = ("astronaut", "coffee", "chelsea", "rocket", "camera", "clock", "coins", "colorwheel", "motorcycle", "logo")
SCENES = ("astronaut", "coffee", "chelsea", "rocket", "camera", "motorcycle", "tissue", "hubble", "brick",
           "grass", "gravel", "moon", "retina", "clock")
WORDS = ("OPEN", "SALE", "CAFE", "EXIT", "HELLO", "NASA", "STOP", "SPACE", "MOON", "ART", "TAXI", "BOOKS")
COLOURS = {"red": (220, 40, 40), "blue": (40, 70, 220), "green": (40, 170, 60), "yellow": (235, 210, 40),
            "purple": (140, 50, 190), "orange": (240, 140, 30), "white": (240, 240, 240), "black": (20, 20, 20)}


@lru_cache(maxsize=1)
def photo_pool(short_side: int = 256) -> dict:
    """RGB photos from skimage.data, downscaled once so that the short side is ``short_side``."""
    from skimage import data

    pool = {}
    for name, (loader, _, _) in PHOTOS.items():
        arr = getattr(data, loader)()
        if isinstance(arr, tuple):  # stereo_motorcycle -> (left, right, disparity)
            arr = arr[0]
        arr = np.asarray(arr)
        if arr.dtype == bool:
            arr = arr.astype(np.uint8) * 255
        if arr.ndim == 2:
            arr = np.stack([arr] * 3, axis=-1)
        arr = arr[..., :3].astype(np.uint8)
        img = Image.fromarray(arr, "RGB")
        scale = short_side / min(img.size)
        if scale < 1:
            size = (max(1, round(img.width * scale)), max(1, round(img.height * scale)))
            img = img.resize(size, Image.Resampling.LANCZOS)
        pool[name] = img
    return pool


def crop_box(img: Image.Image, box, rng: np.random.Generator, jitter: float = 0.06) -> Image.Image:
    """A square crop around ``box`` (fractions) with its edges moved by up to ``jitter``."""
    w, h = img.size
    x0, y0, x1, y1 = box
    j = rng.uniform(-jitter, jitter, 4)
    x0, x1 = sorted((np.clip(x0 + j[0], 0, 1), np.clip(x1 + j[1], 0, 1)))
    y0, y1 = sorted((np.clip(y0 + j[2], 0, 1), np.clip(y1 + j[3], 0, 1)))
    bx = [x0 * w, y0 * h, max(x1 * w, x0 * w + 8), max(y1 * h, y0 * h + 8)]
    cx, cy = (bx[0] + bx[2]) / 2, (bx[1] + bx[3]) / 2
    side = min(max(bx[2] - bx[0], bx[3] - bx[1]), w, h)
    cx = np.clip(cx, side / 2, w - side / 2)
    cy = np.clip(cy, side / 2, h - side / 2)
    bx = [cx - side / 2, cy - side / 2, cx + side / 2, cy + side / 2]
    return img.crop(tuple(int(round(v)) for v in bx))


def scene_crop(img: Image.Image, rng: np.random.Generator, size: int) -> Image.Image:
    w, h = img.size
    side = int(min(w, h) * rng.uniform(0.7, 1.0))
    x = int(rng.integers(0, w - side + 1))
    y = int(rng.integers(0, h - side + 1))
    return img.crop((x, y, x + side, y + side)).resize((size, size), Image.Resampling.BILINEAR)


def text_card(word: str, size: int, rng: np.random.Generator) -> Image.Image:
    bg = tuple(int(v) for v in rng.integers(150, 256, 3))
    fg = tuple(int(v) for v in rng.integers(0, 90, 3))
    img = Image.new("RGB", (size, size), bg)
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=max(10, size // 5))  # Pillow >= 10.1 (setup.cfg: >= 12)
    left, top, right, bottom = draw.textbbox((0, 0), word, font=font)
    draw.text(((size - (right - left)) / 2 - left, (size - (bottom - top)) / 2 - top), word, fill=fg, font=font)
    return img


@lru_cache(maxsize=64)
def _feather_mask(w: int, h: int) -> Image.Image:
    mask = Image.new("L", (w, h), 0)
    ImageDraw.Draw(mask).ellipse((w * 0.06, h * 0.06, w * 0.94, h * 0.94), fill=255)
    return mask.filter(ImageFilter.GaussianBlur(max(1.0, min(w, h) / 10)))


def paste(canvas: Image.Image, obj: Image.Image, pos, size: int, *, hard: bool, rng: np.random.Generator) -> None:
    obj = obj.resize((size, size), Image.Resampling.BILINEAR)
    if hard:
        # "pasted without blending": a hard rectangle with a brightness mismatch.
        arr = np.asarray(obj, dtype=np.float32) * rng.uniform(1.25, 1.45)
        canvas.paste(Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8)), pos)
    else:
        canvas.paste(obj, pos, _feather_mask(size, size))


def colour_transfer(img: Image.Image, ref: Image.Image, weight: float) -> Image.Image:
    """Reinhard-style per-channel mean/std transfer (a stand-in for style/filter transfer)."""
    a = np.asarray(img, dtype=np.float32)
    b = np.asarray(ref, dtype=np.float32)
    am, asd = a.mean((0, 1)), a.std((0, 1)) + 1e-3
    bm, bsd = b.mean((0, 1)), b.std((0, 1)) + 1e-3
    out = (a - am) / asd * bsd + bm
    out = (1 - weight) * a + weight * out
    return Image.fromarray(np.clip(out, 0, 255).astype(np.uint8))


def image_bytes(image: Image.Image, quality: int = 90, format: str = "JPEG") -> bytes:
    """The image encoded as JPEG (what the releases embed or store), or in another ``format``."""
    buffer = io.BytesIO()
    image.save(buffer, format=format, quality=int(quality))
    return buffer.getvalue()


def jpeg_roundtrip(img: Image.Image, quality: int) -> Image.Image:
    return Image.open(io.BytesIO(image_bytes(img, quality))).convert("RGB")


def add_noise(img: Image.Image, sigma: float, rng: np.random.Generator) -> Image.Image:
    a = np.asarray(img, dtype=np.float32) + rng.normal(0, sigma, (img.height, img.width, 3)).astype(np.float32)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def colour_cast(img: Image.Image, severity: float, rng: np.random.Generator) -> Image.Image:
    gains = 1.0 + severity * 0.45 * rng.choice([-1.0, 1.0], 3) * rng.uniform(0.6, 1.0, 3)
    a = np.asarray(img, dtype=np.float32) * gains + severity * rng.uniform(-25, 25, 3)
    return Image.fromarray(np.clip(a, 0, 255).astype(np.uint8))


def save_jpeg(img: Image.Image, path: Path, quality: int = 90) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="JPEG", quality=quality, optimize=False)

"""Trivial editing systems for the MER-Bench construction tests and a dry run of ``miescore mer-bench
candidates`` (``--system tint=modeling_miescore.testing.toy_editors:tint``): each returns a visibly changed
copy of the source image, deterministic in ``seed``. ``MIESCORE_TOY_EDITOR_DELAY`` (seconds) slows each
edit, so a test can kill a run in the middle."""

from __future__ import annotations

import random

from PIL import Image, ImageFilter, ImageOps

from .editor_rewards import env_delay

__all__ = ["blur", "mirror", "tint"]


def tint(image: Image.Image, instruction: str, *, seed: int) -> Image.Image:
    """Blend a seeded colour over the image."""
    env_delay("MIESCORE_TOY_EDITOR_DELAY")
    rng = random.Random(seed)
    colour = Image.new("RGB", image.size, tuple(rng.randrange(256) for _ in range(3)))
    return Image.blend(image.convert("RGB"), colour, 0.35)


def mirror(image: Image.Image, instruction: str, *, seed: int) -> Image.Image:
    """Flip the image left-right."""
    env_delay("MIESCORE_TOY_EDITOR_DELAY")
    return ImageOps.mirror(image.convert("RGB"))


def blur(image: Image.Image, instruction: str, *, seed: int) -> Image.Image:
    """Blur the image by a seeded radius."""
    env_delay("MIESCORE_TOY_EDITOR_DELAY")
    return image.convert("RGB").filter(ImageFilter.GaussianBlur(1 + seed % 3))

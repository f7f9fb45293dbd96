"""How the reward client sends images: each image as base64 of its bytes (a path's file unchanged, anything else
as lossless PNG), with its pixel count so requests can be sized to the server's pixel budget.

Images may be file paths, bytes, ``PIL.Image`` objects, numpy arrays (H, W[, C]) or torch tensors ((C, H, W) or
(H, W, C), floats in [0, 1] or uint8).
"""

from __future__ import annotations

import base64
import io
import os
from typing import Any

import numpy as np

__all__ = ["encode_image", "as_image_list", "source_list", "EncodeCache"]


def _tensor_to_numpy(image) -> np.ndarray:
    array = image.detach().float().cpu().numpy() if hasattr(image, "detach") else np.asarray(image)
    if array.ndim == 3 and array.shape[0] in (1, 3, 4) and array.shape[2] not in (1, 3, 4):
        array = np.transpose(array, (1, 2, 0))  # (C, H, W) -> (H, W, C)
    if np.issubdtype(array.dtype, np.floating):
        array = np.clip(array, 0.0, 1.0)  # samplers overshoot [0, 1] slightly
    return array


def encode_image(image) -> str:
    """One image -> base64 of its bytes (a path's file bytes unchanged, anything else as PNG)."""
    return _encoded_with_pixels(image)[0]


def _header_pixels(data: bytes) -> int:
    """Width x height from an image file's header (0 when Pillow cannot read it: the server will say why)."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as opened:
            return opened.size[0] * opened.size[1]
    except Exception:  # noqa: BLE001 - any unreadable file: the server answers with the precise error
        return 0


def _encoded_with_pixels(image) -> tuple[str, int]:
    """``(base64, width x height)`` of one image; the pixel count sizes requests to the server's budget."""
    if isinstance(image, (str, os.PathLike, bytes, bytearray)):
        if isinstance(image, (bytes, bytearray)):
            data = bytes(image)
        else:
            from ..image_io import read_image_file

            data = read_image_file(image)  # a regular file of a bounded size (never a FIFO or a device)
        return base64.b64encode(data).decode("ascii"), _header_pixels(data)
    from ..image_io import load_image

    if hasattr(image, "detach"):  # torch tensor
        image = _tensor_to_numpy(image)
    pil = load_image(image)  # RGB, upright; raises ImageLoadError naming the problem
    buffer = io.BytesIO()
    pil.save(buffer, format="PNG", compress_level=1)  # lossless; level 1 keeps encoding cheap
    return base64.b64encode(buffer.getvalue()).decode("ascii"), pil.size[0] * pil.size[1]


def as_image_list(images) -> list:
    """A batch of images as a list: lists/tuples as they are, a 4-D array/tensor split along its first axis."""
    if isinstance(images, (list, tuple)):
        return list(images)
    if hasattr(images, "ndim") and images.ndim == 4:
        return [images[i] for i in range(images.shape[0])]
    return [images]


def source_list(sources) -> list:
    """One source image (a path, an image, an array) or a list/tuple of them -> a list."""
    if isinstance(sources, (list, tuple)):
        return list(sources)
    return [sources]


class EncodeCache:
    """Encodes each distinct image object once per call (the G candidates of a prompt share their sources) and
    remembers each encoding's pixel count (``pixels[encoded]``)."""

    def __init__(self):
        self._by_id: dict[int, tuple[Any, str]] = {}
        self.pixels: dict[str, int] = {}

    def __call__(self, image) -> str:
        key = id(image)
        hit = self._by_id.get(key)
        if hit is not None and hit[0] is image:
            return hit[1]
        encoded, pixels = _encoded_with_pixels(image)
        self._by_id[key] = (image, encoded)  # keeps the object alive, so its id is not reused
        self.pixels[encoded] = pixels
        return encoded

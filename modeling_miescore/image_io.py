"""Image loading for MIEScore: paths, PIL images or numpy arrays -> upright RGB PIL images.

This is a Hub file: it is copied into every saved checkpoint, so it imports only the standard
library, numpy and Pillow.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

# Pillow itself refuses images above 2 x 89.5 Mpx; we refuse earlier with a message that says what to do.
# 100 Mpx is ~100x the paper's 1,048,576-pixel budget per image, so no real photo is rejected.
DEFAULT_MAX_IMAGE_PIXELS = 100_000_000


class MIEScoreInputError(ValueError):
    """A user-supplied input (image, instruction, sample) is unusable. The message names it and the fix."""


class ImageLoadError(MIEScoreInputError):
    """An image could not be read or decoded."""


def _describe(source) -> str:
    if isinstance(source, (str, os.PathLike)):
        return f"image '{os.fspath(source)}'"
    return f"{type(source).__name__} image"


def _over_white(image: Image.Image) -> Image.Image:
    rgba = image.convert("RGBA")
    background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
    return Image.alpha_composite(background, rgba).convert("RGB")


def _high_bit_depth_to_rgb(image: Image.Image) -> Image.Image:
    # Pillow's convert("RGB") clips 16/32-bit and float data at 255 instead of rescaling it.
    array = np.asarray(image)
    if image.mode.startswith("I;16") or (image.mode == "I" and array.max(initial=0) <= 65535 and array.min(initial=0) >= 0):
        scaled = array.astype(np.float64) / 65535.0
    else:
        lo, hi = float(np.nanmin(array)), float(np.nanmax(array))
        if image.mode == "F" and lo >= 0.0 and hi <= 1.0:
            scaled = array.astype(np.float64)
        else:
            scaled = (array.astype(np.float64) - lo) / (hi - lo) if hi > lo else np.zeros(array.shape)
    gray = np.clip(np.round(np.nan_to_num(scaled) * 255.0), 0, 255).astype(np.uint8)
    return Image.fromarray(gray, mode="L").convert("RGB")


def to_rgb(image: Image.Image) -> Image.Image:
    """Convert any Pillow mode to 8-bit RGB; transparent pixels are composited over white."""
    mode = image.mode
    if mode == "RGB":
        return image
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        return _over_white(image)
    if mode == "P":
        if "transparency" in image.info:
            return _over_white(image.convert("RGBA"))
        return image.convert("RGB")
    if mode.startswith("I") or mode == "F":
        return _high_bit_depth_to_rgb(image)
    # 1, L, CMYK, YCbCr, LAB, HSV: Pillow converts these correctly.
    return image.convert("RGB")


def _array_to_image(array: np.ndarray) -> Image.Image:
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (3, 4)):
        raise ImageLoadError(
            f"numpy image has shape {array.shape}; expected (H, W), (H, W, 1), (H, W, 3) or (H, W, 4) "
            "in channels-last order (transpose a (C, H, W) array first)"
        )
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ImageLoadError(f"numpy image has an empty shape {array.shape}")
    if array.dtype == np.bool_:
        array = array.astype(np.uint8) * 255
    elif np.issubdtype(array.dtype, np.floating):
        if not np.isfinite(array).all():
            raise ImageLoadError("numpy image contains NaN or infinite values")
        if array.min() < 0.0 or array.max() > 1.0:
            raise ImageLoadError(
                f"float numpy image has values in [{array.min():.3g}, {array.max():.3g}]; "
                "float images must be in [0, 1] (or pass uint8 data in [0, 255])"
            )
        array = np.round(array * 255.0).astype(np.uint8)
    elif array.dtype == np.uint16:
        array = (array.astype(np.uint32) * 255 // 65535).astype(np.uint8)
    elif array.dtype != np.uint8:
        raise ImageLoadError(f"numpy image has dtype {array.dtype}; use uint8, uint16, bool or float in [0, 1]")
    image = Image.fromarray(np.ascontiguousarray(array))
    return to_rgb(image)


ORIENTATION_TAG = 0x0112  # EXIF 'Orientation'


def load_image(source, *, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> Image.Image:
    """Load one image as an upright RGB ``PIL.Image``.

    Args:
        source: a file path (``str`` / ``os.PathLike``), a ``PIL.Image.Image`` or a numpy array of shape
            (H, W), (H, W, 1), (H, W, 3) or (H, W, 4) with dtype uint8, uint16, bool or float in [0, 1].
        max_image_pixels: images with more pixels than this are refused before decoding
            (decompression-bomb guard).

    EXIF orientation is applied, and every Pillow mode (P, LA, RGBA with alpha over white, CMYK, I;16,
    I, F, 1, ...) is converted to 8-bit RGB. Raises :class:`ImageLoadError` with a message naming the
    image and the fix.
    """
    what = _describe(source)
    if isinstance(source, np.ndarray):
        if source.ndim >= 2 and source.shape[0] * source.shape[1] > max_image_pixels:
            raise ImageLoadError(_too_large(what, source.shape[1], source.shape[0], max_image_pixels))
        return _array_to_image(source)
    if isinstance(source, Image.Image):
        image = source
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise ImageLoadError(f"{what} does not exist; check the path")
        if path.is_dir():
            raise ImageLoadError(f"{what} is a directory, not an image file")
        try:
            with warnings.catch_warnings():
                # Pillow warns above ~89 Mpx; our own limit below decides, with a clearer message.
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                image = Image.open(path)
        except Image.DecompressionBombError as err:
            raise ImageLoadError(
                f"{what} is above the safety limit for decoding (decompression-bomb guard: {err}); downscale it"
            ) from None
        except UnidentifiedImageError:
            raise ImageLoadError(
                f"{what} is not an image Pillow can read (corrupt file or not an image); "
                "use PNG, JPEG, WebP, TIFF or BMP"
            ) from None
        except OSError as err:
            raise ImageLoadError(f"{what} is corrupt or truncated and cannot be opened ({err}); re-export it") from None
    else:
        raise ImageLoadError(
            f"unsupported image type {type(source).__name__}; pass a file path, a PIL.Image or a numpy array"
        )

    width, height = image.size
    if width * height > max_image_pixels:
        raise ImageLoadError(_too_large(what, width, height, max_image_pixels))
    if width == 0 or height == 0:
        raise ImageLoadError(f"{what} has zero size ({width}x{height})")
    try:
        image.load()  # decode now so truncated/corrupt data fails here, not deep inside the processor
        if image.getexif().get(ORIENTATION_TAG, 1) != 1:  # exif_transpose copies even upright images
            image = ImageOps.exif_transpose(image)
        return to_rgb(image)
    except OSError as err:
        raise ImageLoadError(f"{what} is truncated or corrupt ({err}); re-export or re-download it") from None


def _too_large(what: str, width: int, height: int, limit: int) -> str:
    return (
        f"{what} is {width}x{height} = {width * height / 1e6:.0f} Mpx, above the {limit / 1e6:.0f} Mpx safety "
        "limit (decompression-bomb guard); downscale it or raise max_image_pixels"
    )

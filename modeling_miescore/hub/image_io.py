"""Image loading for MIEScore: paths, PIL images or numpy arrays -> upright RGB PIL images.

Every entry point (the Python API, ``miescore score`` / ``score-batch``, the Space, the reward server) reads
images through this module, so its guards hold everywhere:

* only regular files are opened, after resolving links (a FIFO or a device would block or never end), and no
  image file above :data:`MAX_IMAGE_FILE_BYTES`; code that needs a file's bytes (hashing, uploading, copying into
  a dataset) reads them with :func:`read_image_file`, which checks the opened file before reading it;
* only the formats in :data:`ALLOWED_IMAGE_FORMATS` are identified (Pillow's own decoders; EPS/PS would run
  Ghostscript, and are never opened);
* sizes are checked from the header before any pixel is decoded: a per-image limit
  (``max_image_pixels``), an aspect-ratio limit (:data:`MAX_ASPECT_RATIO`, the processor's) and, in
  ``processing_miescore.EditSample.load``, a per-sample budget of decoded pixels;
* an image far above the model's pixel budget is reduced while decoding (:func:`decode_image`, never below it);
  fitting an image to a budget is one rule everywhere, the processor's (:func:`smart_size`, :func:`resize_to_budget`).

This is a Hub file: it is copied into every saved checkpoint, so it imports only the standard library, numpy
and Pillow.
"""

from __future__ import annotations

import errno
import io
import math
import os
import stat
import warnings
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from .errors import MIEScoreInputError

# Pillow itself refuses images above 2 x 89.5 Mpx; we refuse earlier with a message that says what to do.
# 100 Mpx is ~100x the paper's 1,048,576-pixel budget per image, so no real photo is rejected.
DEFAULT_MAX_IMAGE_PIXELS = 100_000_000

# An image file larger than this is refused before it is read: 1 GiB holds an uncompressed 100 Mpx image with
# 16-bit RGBA channels (800 MB); no compressed one comes near it.
MAX_IMAGE_FILE_BYTES = 1 << 30

# Formats decoded by Pillow's own code (plus libjpeg/libpng/libwebp/libtiff). Everything else is refused
# unidentified: EPS/PS would be rendered by Ghostscript, an external interpreter of untrusted programs.
ALLOWED_IMAGE_FORMATS = ("PNG", "JPEG", "WEBP", "TIFF", "BMP", "GIF")

# transformers' smart_resize (Qwen2-VL/Qwen3-VL image processor) raises for a longer/shorter side ratio above
# 200; we refuse such images up front, naming them (padding would score a different image than was given).
MAX_ASPECT_RATIO = 200

# An image is reduced while decoding only when it is at least this many times the target pixel count, and
# never below the target, so the processor's own resize still does the last step (see decode_image).
REDUCE_ABOVE = 4

_TRANSPOSE_FOR_ORIENTATION = {  # EXIF orientation -> the transpose that makes the image upright
    2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
ORIENTATION_TAG = 0x0112  # EXIF 'Orientation'
# Modes Image.reduce works on directly (RGBA and LA are premultiplied by Pillow while reducing).
_REDUCIBLE_MODES = ("L", "LA", "RGB", "RGBA", "I", "F", "CMYK", "YCbCr")


class ImageLoadError(MIEScoreInputError):
    """An image could not be read or decoded."""


def describe_image(source) -> str:
    """How messages name an image: ``image '<path>'`` or ``<type> image``."""
    if isinstance(source, (str, os.PathLike)):
        return f"image '{os.fspath(source)}'"
    return f"{type(source).__name__} image"


def regular_file_problem(path, what: str = "image") -> str | None:
    """Why ``path`` cannot be read as a regular file (missing, a folder, a symlink loop, a FIFO...), or None;
    ``stat`` only: a FIFO is never opened (opening one blocks until a writer appears)."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return f"{what} '{os.fspath(path)}' does not exist; check the path"
    except OSError as err:
        if err.errno == errno.ELOOP:
            return f"{what} '{os.fspath(path)}' is a symbolic link loop; point it at a real file"
        return f"cannot read {what} '{os.fspath(path)}': {err.strerror}"
    if stat.S_ISDIR(info.st_mode):
        return f"{what} '{os.fspath(path)}' is a directory, not a file"
    if not stat.S_ISREG(info.st_mode):
        return f"{what} '{os.fspath(path)}' is not a regular file (a pipe, socket or device); pass a file"
    return None


def _size_problem(size: int, path, what: str, max_bytes: int) -> str | None:
    if size == 0:
        return f"{what} '{os.fspath(path)}' is empty (zero bytes); re-export it"
    if size > max_bytes:
        return (f"{what} '{os.fspath(path)}' is {size:,} bytes, above the {max_bytes:,}-byte limit for one image "
                "file; downscale or recompress it")
    return None


def open_without_blocking(path):
    """``(file, os.stat_result)`` of ``path`` opened for reading without blocking, so that a FIFO swapped in after a
    check cannot hang the open; the caller checks ``stat.S_ISREG(result.st_mode)`` on what was opened and closes the
    file. ``OSError`` when it cannot be opened."""
    handle = os.fdopen(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb")
    return handle, os.fstat(handle.fileno())


def read_image_file(path, what: str = "image", max_bytes: int = MAX_IMAGE_FILE_BYTES) -> bytes:
    """The bytes of the image file ``path``: a regular file (links resolved) of at most ``max_bytes``, checked on
    the opened file itself (opened without blocking, so a FIFO swapped in after a ``stat`` cannot hang it), and
    never more than ``max_bytes`` read (a file that grows meanwhile is refused). Raises :class:`ImageLoadError`."""
    problem = regular_file_problem(path, what)
    if problem is not None:
        raise ImageLoadError(problem)
    try:
        handle, info = open_without_blocking(path)
    except OSError as err:
        raise ImageLoadError(f"cannot read {what} '{os.fspath(path)}': {err.strerror}") from None
    with handle:
        problem = (f"{what} '{os.fspath(path)}' is not a regular file (a pipe, socket or device); pass a file"
                   if not stat.S_ISREG(info.st_mode) else _size_problem(info.st_size, path, what, max_bytes))
        if problem is not None:
            raise ImageLoadError(problem)
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ImageLoadError(_size_problem(len(data), path, what, max_bytes))
    return data


def check_image_complete(source, what: str = "image") -> None:
    """Refuse a truncated or damaged PNG (a path or file bytes) from its chunks and their checksums, without
    decoding a pixel (Pillow's ``verify``: memory stays small whatever size the header claims); other formats
    are left to decoding. Raises :class:`ImageLoadError`."""
    data = io.BytesIO(bytes(source)) if isinstance(source, (bytes, bytearray)) else Path(source)
    image = _identify(data, what)
    try:
        if image.format == "PNG":
            image.verify()
    except (OSError, ValueError, SyntaxError, EOFError) as err:
        raise ImageLoadError(f"{what} is truncated or corrupt ({err}); re-export or re-download it") from None
    finally:
        image.close()


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
    return Image.fromarray(np.ascontiguousarray(array))


def _too_large(what: str, width: int, height: int, limit: int) -> str:
    return (
        f"{what} is {width}x{height} = {width * height / 1e6:.0f} Mpx, above the {limit / 1e6:.0f} Mpx safety "
        "limit (decompression-bomb guard); downscale it or raise max_image_pixels"
    )


def check_aspect_ratio(width: int, height: int, where: str, limit: int = MAX_ASPECT_RATIO) -> None:
    """Raise :class:`ImageLoadError` naming ``where`` when the longer side is over ``limit`` times the shorter
    (the Qwen-VL processor would raise a bare ``ValueError`` deep inside the batch)."""
    if width and height and max(width, height) / min(width, height) > limit:
        raise ImageLoadError(
            f"{where} is {width}x{height}, an aspect ratio of {max(width, height) / min(width, height):.0f}:1, "
            f"above the {limit}:1 the Qwen-VL processor accepts; crop or pad it to at most {limit}:1"
        )


def check_image_size(width: int, height: int, what: str, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
                     max_aspect_ratio: int | None = MAX_ASPECT_RATIO) -> None:
    """The header checks every image passes before decoding: pixel limit, zero size, aspect ratio."""
    if width * height > max_image_pixels:
        raise ImageLoadError(_too_large(what, width, height, max_image_pixels))
    if width == 0 or height == 0:
        raise ImageLoadError(f"{what} has zero size ({width}x{height})")
    if max_aspect_ratio is not None:
        check_aspect_ratio(width, height, what, max_aspect_ratio)


def _identify(source, what: str) -> Image.Image:
    """The header of an image file (a path or a binary file object), in an allowed format only."""
    try:
        with warnings.catch_warnings():
            # Pillow warns above ~89 Mpx; our own limit decides, with a clearer message.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return Image.open(source, formats=ALLOWED_IMAGE_FORMATS)
    except Image.DecompressionBombError as err:
        raise ImageLoadError(
            f"{what} is above the safety limit for decoding (decompression-bomb guard: {err}); downscale it"
        ) from None
    except UnidentifiedImageError:
        raise ImageLoadError(
            f"{what} is not an image Pillow can read (corrupt, not an image, or a format outside "
            f"{', '.join(ALLOWED_IMAGE_FORMATS)}, the accepted ones); use PNG, JPEG or WebP"
        ) from None
    except (OSError, ValueError, SyntaxError, EOFError) as err:
        raise ImageLoadError(f"{what} is corrupt or truncated and cannot be opened ({err}); re-export it") from None


def _is_closed(image: Image.Image) -> bool:
    """A closed image (``.close()``), or a never-decoded one whose file was closed (a ``with`` block ended)."""
    if getattr(image, "tile", None) and getattr(image, "fp", None) is None:
        return True
    try:
        image.im  # noqa: B018 - Pillow raises ValueError("Operation on closed image") for a closed image
    except ValueError:
        return True
    except AssertionError:  # opened, not decoded yet
        return False
    return False


def open_image_bytes(data: bytes, what: str = "image data") -> Image.Image:
    """Identify in-memory image file bytes (data URLs, uploads, dataset rows); header only, allowlist only."""
    if not data:
        raise ImageLoadError(f"{what} is empty (zero bytes)")
    return _identify(io.BytesIO(data), what)


def open_image(source, *, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
               max_aspect_ratio: int | None = MAX_ASPECT_RATIO):
    """Read an image's header without decoding pixels (a lazily decoded ``PIL.Image`` for a path; a given image or
    array as it is); every check that needs no pixels runs here. Raises :class:`ImageLoadError`."""
    what = describe_image(source)
    if isinstance(source, np.ndarray):
        if source.ndim >= 2:
            check_image_size(source.shape[1], source.shape[0], what, max_image_pixels, max_aspect_ratio)
        return source
    if isinstance(source, Image.Image):
        image = source
        if _is_closed(image):
            raise ImageLoadError("PIL image is closed; pass an open image (not one used after .close() or after "
                                 "its `with Image.open(...)` block ended)")
    elif isinstance(source, (str, os.PathLike)):
        problem = regular_file_problem(source) or _size_problem(os.path.getsize(source), source, "image",
                                                                 MAX_IMAGE_FILE_BYTES)
        if problem:
            raise ImageLoadError(problem)
        image = _identify(Path(source), what)
    else:
        raise ImageLoadError(
            f"unsupported image type {type(source).__name__}; pass a file path, a PIL.Image or a numpy array"
        )
    check_image_size(*image.size, what, max_image_pixels, max_aspect_ratio)
    return image


def smart_size(width: int, height: int, max_pixels: int, min_pixels: int = 0, factor: int = 1) -> tuple[int, int]:
    """``(width, height)`` by transformers' ``smart_resize`` rule (the Qwen-VL processor's): sides multiples of
    ``factor``, aspect ratio kept, area brought into ``[min_pixels, max_pixels]`` (the defaults: only shrunk to
    ``max_pixels``). Any aspect ratio is taken (the loaders' check is :func:`check_aspect_ratio`)."""
    h_bar, w_bar = round(height / factor) * factor, round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar, w_bar = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return w_bar, h_bar


def resize_to_budget(image: Image.Image, max_pixels: int, min_pixels: int = 0, factor: int = 1) -> Image.Image:
    """``image`` resized (bicubic) to its :func:`smart_size`, or ``image`` itself when it has that size."""
    size = smart_size(*image.size, max_pixels, min_pixels, factor)
    return image if size == image.size else image.resize(size, Image.Resampling.BICUBIC)


def reduction_factor(width: int, height: int, target_pixels: int | None) -> int:
    """Integer factor an image is shrunk by while decoding: 1 unless it has at least ``REDUCE_ABOVE`` times
    ``target_pixels``; then the largest factor ``f`` with ``(width / f) * (height / f) >= target_pixels``, so
    the processor's own resize still does the last step."""
    if not target_pixels or width * height < REDUCE_ABOVE * target_pixels:
        return 1
    return max(1, math.isqrt(width * height // target_pixels))


def _draft_request(image: Image.Image, target_pixels: int | None) -> tuple[int, int] | None:
    """The size to ask ``Image.draft`` for (a not yet decoded, single-tile JPEG far above the target), or None."""
    factor = reduction_factor(*image.size, target_pixels)
    if factor <= 1 or image.format != "JPEG" or len(getattr(image, "tile", ())) != 1:  # tile: not decoded yet
        return None
    return math.ceil(image.size[0] / factor), math.ceil(image.size[1] / factor)


def decoded_pixels(image, target_pixels: int | None = None) -> int:
    """Pixels that decoding ``image`` (from :func:`open_image`) allocates at once: its size, or for a JPEG
    drafted by :func:`decode_image` the size libjpeg decodes at (1/2, 1/4 or 1/8 scale, Pillow's rule)."""
    if isinstance(image, np.ndarray):
        return int(image.shape[0] * image.shape[1]) if image.ndim >= 2 else 0
    width, height = image.size
    request = _draft_request(image, target_pixels)
    if request is None:
        return width * height
    scale = min(width // request[0], height // request[1])
    scale = next(s for s in (8, 4, 2, 1) if scale >= s)
    return -(-width // scale) * -(-height // scale)


def _reduce(image: Image.Image, factor: int) -> Image.Image:
    if factor <= 1:
        return image
    if image.mode == "1":
        image = image.convert("L")  # box-averaged grey keeps thin lines visible
    elif image.mode.startswith("I;16"):
        image = image.convert("I")
    elif image.mode not in _REDUCIBLE_MODES:
        image = to_rgb(image)
    return image.reduce(factor)


def decode_image(image, what: str = "image", target_pixels: int | None = None) -> Image.Image:
    """Decode an image from :func:`open_image` into upright 8-bit RGB.

    With ``target_pixels`` (the model's ``max_pixels``), an image of at least ``REDUCE_ABOVE`` times that many
    pixels is shrunk by an integer factor to no less than the target: JPEG at decode time
    (``Image.draft``, libjpeg's DCT scaling), other formats right after decoding (``Image.reduce``, a box
    filter), so only one full-size image is ever in memory. The processor resizes every image to at most
    ``max_pixels`` anyway; scores from a reduced 24 Mpx JPEG stay within 1 point (0-100 scale) of full
    decoding (``tests/diagnostics/test_decoding_budget.py::test_reduced_decoding_scores_like_full_decoding``).
    """
    if isinstance(image, np.ndarray):
        return to_rgb(_array_to_image(image))
    try:
        request = _draft_request(image, target_pixels)
        if request is not None:
            image.draft(None, request)
        factor = reduction_factor(*image.size, target_pixels)
        image.load()  # decode now so truncated/corrupt data fails here, not deep inside the processor
        orientation = image.getexif().get(ORIENTATION_TAG, 1)
        image = _reduce(image, factor)
        if orientation in _TRANSPOSE_FOR_ORIENTATION:
            image = image.transpose(_TRANSPOSE_FOR_ORIENTATION[orientation])
        return to_rgb(image)
    except (OSError, ValueError, SyntaxError, EOFError) as err:
        raise ImageLoadError(f"{what} is truncated or corrupt ({err}); re-export or re-download it") from None


def load_image(source, *, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, target_pixels: int | None = None,
               max_aspect_ratio: int | None = MAX_ASPECT_RATIO) -> Image.Image:
    """Load one image (a path, a ``PIL.Image`` or a channels-last numpy array) as an upright 8-bit RGB
    ``PIL.Image``: :func:`open_image`, then :func:`decode_image` (``target_pixels``: the model's budget)."""
    what = describe_image(source)
    opened = open_image(source, max_image_pixels=max_image_pixels, max_aspect_ratio=max_aspect_ratio)
    return decode_image(opened, what, target_pixels)
